"""The C compiler's progress line: one plain line on stderr (not a terminal here) once a compile has
run PROGRESS_AFTER seconds, nothing for a quick one, and the compiler's whole output either way."""

import os
import sys

from edgetrain.host import build

SLOW = "import sys, time; time.sleep(0.8); print('o' * 100000); print('e', file=sys.stderr); sys.exit(3)"


def test_a_long_compile_says_what_it_compiles(monkeypatch, capfd):
    monkeypatch.setattr(build, "PROGRESS_AFTER", 0.2)
    result = build.run_compiler([sys.executable, "-c", SLOW], "out/model.c")
    assert (result.stdout, result.stderr, result.returncode) == ("o" * 100000 + "\n", "e\n", 3)
    assert capfd.readouterr().err == f"edgetrain: compiling out/model.c with {os.path.basename(sys.executable)} ...\n"


def test_a_quick_compile_is_quiet(capfd):
    result = build.run_compiler([sys.executable, "-c", "print(1)"], "out/model.c")
    assert (result.stdout, result.returncode) == ("1\n", 0)
    assert capfd.readouterr().err == ""
