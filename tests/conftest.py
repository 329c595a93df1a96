"""The suite's tiers, its build cache, the files the sanitizer pass runs in place of this one, and the
figures a run prints.

pyproject.toml puts the repository (for `examples.models`) and tests/ (for the shared helpers:
gradcheck, models) on sys.path. Every test gets the marker of its tier from its directory, so
`pytest -m unit` runs the tier that needs neither torch nor a cross compiler, and `-m "not slow"`
leaves out the tests that take minutes."""

import os
import subprocess
from pathlib import Path

import pytest
from ort_venv import install_in_background
from sanitize.sanitized import BOTH_PASSES, SANITIZED, sanitizer_compiler

TESTS = Path(__file__).resolve().parent

# tests/<directory> -> tier. A new directory must be given one here (collection fails until it is).
TIERS = {
    "unit": "unit",
    "c": "c",
    "target": "target",
    "zoo": "zoo",
    "sanitize": "sanitize",
    "fuzz": "sanitize",  # libFuzzer under ASan and UBSan, like the sanitizer tier
    "durable": "c",
    "conformance": "c",
    "ort_compat": "c",
}  # host and generated C on this machine

# Tests measured at over 20 s in a whole run (`-n 2 --dist loadfile`) on the shared 2-core machine:
# node ids, or a test's id without its parameters for all of them.
SLOW = {
    "tests/c/test_examples.py::test_federated_example_runs_on_flowers_deployment_engine",
    "tests/c/test_gradients_conv.py::test_exported_cnn_trains_like_torch",
    "tests/c/test_runtime_kernels.py::test_every_kernel_instantiates_without_warnings[-O3]",
    "tests/durable/test_durability.py::test_a_damaged_cache_entry_is_rebuilt_and_trains_the_same",
    "tests/durable/test_durability.py::test_a_save_killed_at_any_moment_leaves_the_old_or_the_new_checkpoint",
    "tests/fuzz/test_fuzz.py::test_fuzz_checkpoint_loader",
    "tests/sanitize/test_sanitizers.py::test_c_tier_under_asan_and_ubsan",
    "tests/target/test_targets.py::test_generated_c_is_cppcheck_clean",
    "tests/target/test_targets.py::test_size_report_on_every_target",
    "tests/target/test_targets.py::test_training_is_bit_identical_on_every_target[conv_zoo-cortex-m3]",
    "tests/target/test_targets.py::test_training_is_bit_identical_on_every_target[conv_zoo-cortex-m33]",
    "tests/target/test_targets.py::test_training_is_bit_identical_on_every_target[conv_zoo-cortex-m4]",
    "tests/target/test_targets.py::test_training_is_bit_identical_on_every_target[conv_zoo-cortex-m55]",
    "tests/target/test_targets.py::test_training_is_bit_identical_on_every_target[conv_zoo-cortex-m7]",
    "tests/target/test_targets.py::test_training_is_bit_identical_on_every_target[conv_zoo-linux-aarch64]",
    "tests/target/test_targets.py::test_training_is_bit_identical_on_every_target[conv_zoo-linux-armhf]",
    "tests/target/test_targets.py::test_training_is_bit_identical_on_every_target[conv_zoo-riscv32-hf]",
    "tests/target/test_targets.py::test_training_is_bit_identical_on_every_target[conv_zoo-riscv32]",
    "tests/zoo/test_zoo.py::test_zoo_model_trains_as_in_pytorch[googlenet-dynamo]",
    "tests/zoo/test_zoo.py::test_zoo_model_trains_as_in_pytorch[googlenet-torchscript]",
    "tests/zoo/test_zoo.py::test_zoo_model_trains_as_in_pytorch[mobilenet_v2-dynamo]",
    "tests/zoo/test_zoo.py::test_zoo_model_trains_as_in_pytorch[mobilenet_v2-torchscript]",
    "tests/zoo/test_zoo.py::test_zoo_model_trains_as_in_pytorch[mobilenet_v3_small-dynamo]",
    "tests/zoo/test_zoo.py::test_zoo_model_trains_as_in_pytorch[mobilenet_v3_small-torchscript]",
    "tests/zoo/test_zoo.py::test_zoo_model_trains_as_in_pytorch[resnet18-dynamo]",
    "tests/zoo/test_zoo.py::test_zoo_model_trains_as_in_pytorch[resnet18-torchscript]",
    "tests/zoo/test_zoo.py::test_zoo_model_trains_as_in_pytorch[shufflenet_v2-dynamo]",
    "tests/zoo/test_zoo.py::test_zoo_model_trains_as_in_pytorch[shufflenet_v2-torchscript]",
}


# pytest-xdist hands out whole files in the order they are collected: the longest tiers go first, so
# the run does not end with one worker on a long file while the other waits.
LONGEST_FIRST = ("sanitize", "zoo", "target", "durable", "fuzz")


def pytest_collection_modifyitems(config, items):
    """Each test's tier marker from its directory under tests/, and slow from SLOW; the longest tiers
    first."""
    folders = {}
    for item in items:
        path = Path(item.path).resolve()
        if not path.is_relative_to(TESTS):
            continue
        folder = folders[item.nodeid] = path.relative_to(TESTS).parts[0]
        if folder not in TIERS:
            raise pytest.UsageError(f"tests/{folder}: no tier; add it to TIERS in tests/conftest.py")
        item.add_marker(TIERS[folder])
        if item.nodeid in SLOW or item.nodeid.split("[")[0] in SLOW:
            item.add_marker("slow")
    rank = {folder: i for i, folder in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(folders.get(item.nodeid, ""), len(rank)))


SANITIZER_PASS = "tests/sanitize/test_sanitizers.py::test_c_tier_under_asan_and_ubsan"


class _SanitizedOnce:
    """A run that holds the sanitizer pass leaves out, from its own pass, the files that the
    sanitizer pass runs (tests/sanitize/sanitized.py says which and why), and says how many in
    pytest's "deselected" count. Last, so that it sees the tests that -m and -k left."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        if os.environ.get("EDGETRAIN_SANITIZE") == "1" or not any(item.nodeid == SANITIZER_PASS for item in items):
            return
        if sanitizer_compiler() is None:  # the sanitizer pass skips: these run here
            return
        there = set(SANITIZED) - set(BOTH_PASSES)
        keep, left = [], []
        for item in items:
            (left if item.nodeid.split("::")[0] in there else keep).append(item)
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = keep


_ORT_INSTALL = pytest.StashKey[subprocess.Popen | None]()


def pytest_configure(config):
    config.pluginmanager.register(_SanitizedOnce(), "edgetrain-sanitized-once")
    # A whole run on CI installs ONNX Runtime training's venv beside its first tests: otherwise the
    # two workers' first tests that need it both wait about a minute for it, the machine idle.
    if not hasattr(config, "workerinput") and not config.option.markexpr:
        config.stash[_ORT_INSTALL] = install_in_background()


def pytest_unconfigure(config):
    install = config.stash.get(_ORT_INSTALL, None)
    if install is not None:
        install.wait()


@pytest.fixture(autouse=True, scope="session")
def _build_cache(tmp_path_factory):
    """Compiled trainers go to a per-session cache, not the user's."""
    mp = pytest.MonkeyPatch()
    mp.setenv("EDGETRAIN_CACHE", str(tmp_path_factory.mktemp("edgetrain-cache")))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def quick_build():
    """A module's trainers build at -Og (EDGETRAIN_BUILD=quick, compiler/host/build.py): the same bits
    as the default -O2 build (tests/c/test_build_modes.py), several times faster to compile for a
    model of many small nodes. For the files that compile many models to run a few steps of each
    (`pytestmark = pytest.mark.usefixtures("quick_build")`): the zoo, and the C tier's imports,
    memory policies and quantized models among others. The gradient files, the kernels and the
    targets test the optimized builds."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGETRAIN_BUILD", "quick")
        yield


@pytest.fixture
def figure(record_property):
    """figure(text): a measured figure the test prints at the end of the run, even under -q and from
    pytest-xdist's workers (it travels in the test's report)."""
    return lambda text: record_property("figure", text)


def pytest_terminal_summary(terminalreporter):
    """What the run measured, printed even under -q. It is gathered from the tests' reports, the only
    thing pytest-xdist's workers send back, so the hook lives here: the controller reads this conftest
    but not those of the test directories, which only the workers collect."""
    reports = [r for rs in terminalreporter.stats.values() for r in rs if getattr(r, "when", None) == "call"]
    _figures(terminalreporter, reports)
    _zoo(terminalreporter, reports)
    _conformance(terminalreporter, reports)


def _properties(reports, name: str) -> list:
    return [(report, value) for report in reports for key, value in report.user_properties if key == name]


def _figures(terminalreporter, reports) -> None:
    lines = [
        f"{report.nodeid.split('::')[-1]}: {value}" for report, value in _properties(reports, "figure") if report.passed
    ]
    if lines:
        terminalreporter.section("figures")
        for line in lines:
            terminalreporter.write_line(line)


def _zoo(terminalreporter, reports) -> None:
    """The zoo's table: model x exporter -> result, as tests/zoo recorded it."""
    results = {(value[0], value[1]): value[2] for _, value in _properties(reports, "zoo")}
    if not results:
        return
    terminalreporter.section("model zoo")
    for (model, exporter), result in sorted(results.items()):
        terminalreporter.write_line(f"{model:20s} {exporter:12s} {result}")
    ok = sum(r.startswith("ok") for r in results.values())
    terminalreporter.write_line(f"{ok}/{len(results)} (model, exporter) pairs train and match PyTorch")


def _conformance(terminalreporter, reports) -> None:
    ran = [r for r in reports if "::test_case_matches_onnx[" in r.nodeid]
    if ran:
        from conformance.cases import CASES

        excluded = sum(len(cases.excluded) for cases in CASES.values())
        collected = sum(len(cases.listed) for cases in CASES.values())
        terminalreporter.write_line(
            f"ONNX backend node tests: {sum(r.passed for r in ran)} passed of {collected} "
            f"collected for supported ops, {excluded} excluded"
        )
