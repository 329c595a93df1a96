"""The web example (examples/web, `make web`) in headless Chromium through Playwright: the page trains
the digits classifier to at least 90 % held-out accuracy, printing the very losses and parameter hash
that `edgetrain run` prints on the host and on cortex-m4 for the same batches; its checkpoint loads on the host; a
digit drawn on the pad fine-tunes the model, whose delta reaches the example's aggregator. Skips
name what is missing (chromium, playwright, the wasm32 target's packages); under CI they fail."""

import hashlib
import importlib.util
import os
import shutil
import threading
from pathlib import Path

import pytest

from edgetrain import api, firmware
from test_targets import need

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "web" / "run.py"
EPOCHS = 3


def missing(what: str) -> None:
    (pytest.fail if os.environ.get("CI") else pytest.skip)(what)


@pytest.fixture
def browser():
    need("wasm32")
    chromium = shutil.which("chromium")
    if chromium is None:
        missing("chromium missing; apt-get install chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright missing; pip install playwright (it drives the system's chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium)
        yield browser
        browser.close()


@pytest.fixture
def site(tmp_path):
    """(the page's URL, the built files, the server) for the example prepared in tmp_path."""
    spec = importlib.util.spec_from_file_location("web_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    directory = example.prepare(tmp_path / "web")
    with example.server(directory, 0) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        yield f"http://127.0.0.1:{httpd.server_address[1]}/", directory, httpd
        httpd.shutdown()


def test_the_page_trains_as_the_host_does(browser, site, tmp_path, figure):
    url, directory, httpd = site
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(error))
    page.goto(url)
    page.wait_for_selector("#train:not([disabled])")
    page.fill("#epochs", str(EPOCHS))
    page.click("#train")
    page.wait_for_selector("#train:not([disabled])", timeout=120_000)
    log = page.text_content("#log").splitlines()
    steps = len(log) - 1
    accuracy = float(page.get_attribute("#accuracy", "data-value"))
    size = (directory / "model.wasm").stat().st_size
    figure(f"browser: {accuracy:.1%} held-out accuracy after {steps} steps; model.wasm {size:,} bytes")
    print(f"held-out accuracy {accuracy:.1%} after {steps} steps; model.wasm {size:,} bytes")

    host = firmware.run([(directory / "artifacts", directory / "digits.npz")], "host", steps, timeout=120)
    assert log == host.splitlines() and steps == EPOCHS * 44
    need("cortex-m4")  # and on a microcontroller, emulated: the same lines again
    cortex_m4 = firmware.run(
        [(directory / "artifacts", directory / "digits.npz")],
        "cortex-m4",
        steps,
        build=tmp_path / "cortex-m4",
        timeout=300,
    )
    assert log == cortex_m4.splitlines()
    assert accuracy >= 0.9

    with page.expect_download() as download:  # the trained model, in the host's checkpoint format
        page.click("#download")
    state = api.CheckpointState.load_checkpoint(download.value.path())
    module = api.Module(directory / "artifacts" / "training_model.onnx", state)
    params = module.get_contiguous_parameters(trainable_only=True).astype("<f4")
    assert log[-1] == f"params sha256 {hashlib.sha256(params.tobytes()).hexdigest()}"

    box = page.locator("#pad").bounding_box()  # a 1: one vertical stroke
    page.mouse.move(box["x"] + 80, box["y"] + 20)
    page.mouse.down()
    page.mouse.move(box["x"] + 80, box["y"] + 140, steps=12)
    page.mouse.up()
    page.fill("#digit", "1")
    page.click("#finetune")
    assert page.text_content("#prediction").startswith("Fine-tuned on your 1")
    page.click("#send")
    page.wait_for_selector("#aggregator[data-values]")
    [delta] = httpd.deltas
    assert delta.size == params.size and page.get_attribute("#aggregator", "data-values") == str(params.size)
    assert 0 < abs(delta).max() < 1  # what ten steps of fine-tuning changed
    assert errors == []
