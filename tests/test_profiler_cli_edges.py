"""`rlsys profile` at the edges: a command that is not Python, signals before the command
starts or while results are written, processes left running after the command."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from pathlib import Path

import pytest

from rlsys.cli import main
from rlsys.profiler import launch


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


LEAVES_A_SLEEPER = """
import pathlib, subprocess, sys
sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
pathlib.Path(sys.argv[1]).write_text(str(sleeper.pid))
"""


def test_a_process_left_running_is_named(tmp_path: Path, monkeypatch, capsys) -> None:
    """It was waited for `GRACE_S`, then left running without a word."""
    monkeypatch.setattr(launch, "GRACE_S", 0.3)
    script = tmp_path / "script.py"
    script.write_text(LEAVES_A_SLEEPER)
    pid_file = tmp_path / "sleeper.pid"
    try:
        argv = ["profile", "--quiet", "--out", str(tmp_path / "p"), str(script), str(pid_file)]
        assert main(argv) == 0
        err = capsys.readouterr().err.strip().splitlines()
        sleeper = int(pid_file.read_text())
        warning = [line for line in err if "left running" in line]
        assert warning == [f"rlsys profile: warning: left running after the command ended: "
                           f"{sleeper} (sleep 30)"]  # fmt: skip
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
