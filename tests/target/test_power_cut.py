"""Power cuts during checkpoint saves on a Cortex-M4 under QEMU (issue 25, "Nothing lost").

The harness keeps its trainer's two checkpoint slots in a host file and saves every SAVE_EVERY
steps (`edgetrain run --flash --save-every`). A file beside it makes the firmware stop at once
after N programmed bytes, like a power cut, without a rebuild. Each run starts with blank flash,
is cut at some N, and restarts without a cut: the restart must resume from the last save that
completed before N and then print exactly what an uninterrupted run prints from there, every
`step` line (%.9g of the loss) and the final parameter hash included.

The byte counts N are drawn, seeded, in equal shares from three kinds of place in the run's
writes: inside a checkpoint's bytes, inside a slot header (its fields or its commit mark), and
exactly between two program calls (nothing of the next one written). Uniform draws would land
almost only inside checkpoints, which are 30 times longer than headers."""

import collections
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from test_targets import make_data, need, reference_lines

from edgetrain import artifacts, firmware
from edgetrain.cli import main
from models import mlp

STEPS, SAVE_EVERY, RUNS, SEED = 12, 3, 200, 25
HEADER, FIELDS = 24, 16  # a slot's header (templates/macros.j2): fields programmed first, then an 8-byte mark
TARGET = "cortex-m4"


def write_plan(checkpoint: int, saves: int) -> dict[str, list[int]]:
    """Programmed-byte counts by where a cut after them lands. A save programs the checkpoint, then
    the header's fields, then its mark: three calls. A count equal to a call's start leaves that
    call unwritten ("between")."""
    places = {"checkpoint": [], "header": [], "between": []}
    per_save = checkpoint + HEADER
    for k in range(saves):
        start = k * per_save
        calls = [start, start + checkpoint, start + checkpoint + FIELDS]
        places["between"] += calls
        places["checkpoint"] += range(start + 1, start + checkpoint)
        places["header"] += [n for n in range(start + checkpoint + 1, start + per_save) if n not in calls]
    return places


def run_lines(fw: firmware.Firmware, directory, cut: int | None) -> tuple[int, list[str]]:
    """(exit status, printed lines) of one run in `directory`, whose flash.bin it keeps."""
    cut_file = directory / "flash.bin.cut"
    if cut is None:
        cut_file.unlink(missing_ok=True)
    else:
        cut_file.write_text(f"{cut}\n")
    result = fw.run(timeout=60, cwd=directory)
    assert result is not None, "the firmware did not finish"
    return result.returncode, result.stdout.splitlines()


def test_a_power_cut_anywhere_in_a_save_resumes_from_the_last_complete_checkpoint(tmp_path, figure):
    need(TARGET)
    start = time.monotonic()
    directory = artifacts.generate_artifacts(mlp(batch=2, sizes=(4, 6, 3)), artifact_directory=tmp_path / "mlp")
    data = make_data((2, 4), batches=3)
    fw = firmware.build_firmware(
        [(directory, data)], TARGET, STEPS, build=tmp_path / "build", flash="flash.bin", save_every=SAVE_EVERY
    )
    (tmp_path / "whole").mkdir()
    status, whole = run_lines(fw, tmp_path / "whole", None)
    saved = [int(line.split()[-1]) for line in whole if line.startswith("flash saved step")]
    assert status == 0 and whole[0] == "flash empty" and saved == list(range(SAVE_EVERY, STEPS + 1, SAVE_EVERY))
    # With flash, the firmware still trains as the host trainer does.
    assert [line for line in whole if not line.startswith("flash")] == reference_lines(directory, data, STEPS)
    checkpoint = int.from_bytes((tmp_path / "whole" / "flash.bin").read_bytes()[12:16], "little")
    plan = write_plan(checkpoint, len(saved))

    rng = np.random.default_rng(SEED)
    kinds = [("checkpoint", "header", "between")[i % 3] for i in range(RUNS)]
    cuts = [int(rng.choice(plan[kind])) for kind in kinds]

    def cut_and_restart(i: int) -> int:
        run_dir = tmp_path / f"run{i}"
        run_dir.mkdir()
        status, before = run_lines(fw, run_dir, cuts[i])
        assert status != 0 and before[-1] == f"flash power cut after {cuts[i]} programmed bytes", before[-3:]
        assert before[:-1] == whole[: len(before) - 1]  # up to the cut, the uninterrupted run
        status, after = run_lines(fw, run_dir, None)
        completed = cuts[i] // (checkpoint + HEADER)  # saves whose mark was written in full
        resumed = completed * SAVE_EVERY
        assert status == 0 and after[0] == (f"flash resume step {resumed}" if completed else "flash empty"), (
            cuts[i],
            after[:2],
        )
        assert after[1] == next(line for line in whole if line.startswith(f"step {resumed} "))
        assert after[1:] == whole[whole.index(after[1]) :]
        return resumed

    with ThreadPoolExecutor(max_workers=2) as pool:  # each run is its own QEMU process
        resumed = list(pool.map(cut_and_restart, range(RUNS)))
    figures = {
        "runs": RUNS,
        "checkpoint bytes": checkpoint,
        "cuts": dict(collections.Counter(kinds)),
        "resumed from step": dict(sorted(collections.Counter(resumed).items())),
        "seconds": round(time.monotonic() - start, 1),
    }
    figure(str(figures))
    assert set(resumed) == {0, *saved[:-1]}  # every save was the last complete one in some run


def test_run_command_resumes_from_its_flash_file(tmp_path, capsys, monkeypatch):
    need("host")
    monkeypatch.chdir(tmp_path)  # a relative flash path is taken from here, not from the build directory
    directory = artifacts.generate_artifacts(mlp(batch=2, sizes=(4, 6, 3)), artifact_directory=tmp_path / "mlp")
    data = make_data((2, 4), batches=3)
    np.savez(tmp_path / "data.npz", **data)
    run = ["run", str(directory), "--data", "data.npz", "--flash", "flash.bin"]
    assert main([*run, "--steps", "4", "--save-every", "2"]) == 0
    four = reference_lines(directory, data, 4)
    assert capsys.readouterr().out.splitlines() == [
        "flash empty",
        *four[:2],
        "flash saved step 2",
        *four[2:4],
        "flash saved step 4",
        four[4],
    ]
    assert main([*run, "--steps", "6"]) == 0  # resumes at step 4, saves nothing
    six = reference_lines(directory, data, 6)
    assert capsys.readouterr().out.splitlines() == ["flash resume step 4", *six[4:]]
    for args, message in (
        (["--save-every", "2"], "needs a flash file"),
        (["--flash", "f.bin", "--save-every", "-1"], "must be in [0, 2**32), got -1"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["run", str(directory), "--data", "data.npz", "--steps", "1", *args])
        assert exit_.value.code == 2 and message in capsys.readouterr().err
