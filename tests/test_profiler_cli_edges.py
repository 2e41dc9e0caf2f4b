"""`rlsys profile` at the edges: a command that is not Python, signals before the command
starts or while results are written, processes left running after the command."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlsys.cli import main


@pytest.mark.parametrize("kind", ["program", "shell script"])
def test_a_command_that_is_not_python_says_so(kind: str, tmp_path: Path, capsys) -> None:
    """The hint asked whether the command was run "with an interpreter that has rlsys"."""
    if kind == "program":
        command, expected = [shutil.which("true") or "/bin/true"], "is not a Python program"
    else:
        script = tmp_path / "run.sh"
        script.write_text("#!/bin/sh\nexit 0\n")
        script.chmod(0o755)
        command, expected = [str(script)], "is a sh script, and no Python process it started"
    out = tmp_path / "p"
    assert main(["profile", "--out", str(out), "--", *command]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("error: nothing recorded: ")
    assert expected in err[0] and "records Python processes only" in err[0]
    assert err[1].startswith("hint: profile") and "python train.py" in err[1]
    assert not out.exists()  # no half folder
