"""What `rlsys profile` and `rlsys report` print: a closed pipe, long operation names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from profile_fixtures import SIMULATION_HEAVY, make_summary

from rlsys.profiler.summary import write_summary


def run_into_closed_pipe(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`rlsys ARGV | head -0`: stdout is a pipe whose reader has already gone."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "rlsys.cli", *argv], stdout=write,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                              cwd=cwd, timeout=120)  # fmt: skip
    finally:
        os.close(write)


def test_report_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """rich ended the process with exit code 1 (`rlsys report DIR | head -1`)."""
    write_summary(make_summary(SIMULATION_HEAVY), tmp_path)
    done = run_into_closed_pipe(["report", str(tmp_path)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Error" not in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / "report.html").is_file()  # the files are still written


def test_profile_into_a_closed_pipe_keeps_the_commands_exit_code(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text("import sys\nsys.exit(3)\n")
    done = run_into_closed_pipe(["profile", "--out", "p", "--", str(script)], tmp_path)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and (tmp_path / "p" / "summary.json").is_file()
