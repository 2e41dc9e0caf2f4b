"""`rlsys profile` at the edges: a command that is not Python, signals before the command
starts or while results are written, processes left running after the command."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
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


def test_a_failed_profile_removes_the_folders_it_made(tmp_path: Path, monkeypatch) -> None:
    """The default folder's runs/ and --out's missing parents too, not only the last one;
    a folder that existed before stays."""
    true = shutil.which("true") or "/bin/true"
    monkeypatch.chdir(tmp_path)
    assert main(["profile", "--quiet", "--", true]) == 2
    assert not (tmp_path / "runs").exists()
    (tmp_path / "kept").mkdir()
    assert main(["profile", "--quiet", "--out", "kept/a/b", "--", true]) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and not any(
        (tmp_path / "kept").iterdir()
    )


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


def interrupted_at(where: str):
    """A stand-in for `where` that is interrupted as it runs (Ctrl-C)."""

    def stand_in(*args, **kwargs):
        raise KeyboardInterrupt

    return stand_in


@pytest.mark.parametrize("where", ["trace.json", "report.html"])
def test_interrupted_while_written_no_file_is_cut(where: str, tmp_path: Path, monkeypatch,
                                                   capsys) -> None:  # fmt: skip
    """trace.json was left cut, or summary.json was there without report.html: a folder with
    summary.json now holds the whole profile, and no file is ever half written."""
    from rlsys.profiler import report_html
    from rlsys.trace import chrome

    if where == "trace.json":  # after the events are written, before the trailer
        monkeypatch.setattr(chrome, "_trailer", interrupted_at(where))
    else:
        monkeypatch.setattr(report_html, "render_report", interrupted_at(where))
    script = tmp_path / "script.py"
    script.write_text("import rlsys\nwith rlsys.operation('work'):\n    pass\n")
    out = tmp_path / "p"
    assert main(["profile", "--quiet", "--out", str(out), str(script)]) == 130
    assert not (out / "summary.json").exists() and not (out / where).exists()
    assert sorted(p.name for p in out.iterdir() if p.name.endswith(".tmp")) == []
    assert any((out / "trace").glob("*.jsonl"))  # the recording is kept
    assert "interrupted: while writing the profile" in capsys.readouterr().err


SIGTERM_WHILE_WRITING = """
import os, signal, sys, time
from rlsys.profiler import report_html

def render_report(summary):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)

report_html.render_report = render_report
from rlsys.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_while_writing_leaves_no_temporary_file(tmp_path: Path) -> None:
    """SIGTERM's default action ended the process at once, mid-file."""
    script = tmp_path / "script.py"
    script.write_text("pass\n")
    out = tmp_path / "p"
    done = subprocess.run([sys.executable, "-c", SIGTERM_WHILE_WRITING, "profile", "--quiet",
                           "--out", str(out), str(script)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)  # fmt: skip
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "interrupted: while writing the profile" in done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["breakdown.png", "trace", "trace.json"]


CTRL_C_WHILE_IMPORTING = """
import os, signal, sys
import rlsys.cli

build_parser = rlsys.cli.build_parser

def slow_imports():  # a Ctrl-C while the parser's modules (JAX) are imported
    os.kill(os.getpid(), signal.SIGINT)
    return build_parser()

rlsys.cli.build_parser = slow_imports
sys.exit(rlsys.cli.main(sys.argv[1:]))
"""


def test_ctrl_c_before_the_command_starts_ends_cleanly(tmp_path: Path) -> None:
    """It was lost in JAX's garbage-collection hook (the command ran to its end), or printed
    a KeyboardInterrupt traceback from the imports."""
    marker = tmp_path / "ran"
    script = tmp_path / "script.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    out = tmp_path / "p"
    done = subprocess.run([sys.executable, "-c", CTRL_C_WHILE_IMPORTING, "profile", "--out",
                           str(out), str(script)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120)  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines() == ["interrupted: before the command started"]
    assert not marker.exists() and not out.exists()  # no command, no folder


def test_ctrl_c_before_the_command_recorded_anything_leaves_no_folder(tmp_path: Path,
                                                                       capsys) -> None:  # fmt: skip
    """It said "no profile" with a hint about interpreters, and left an empty folder."""
    out = tmp_path / "p"
    command = ["sh", "-c", "kill -INT $PPID; sleep 5"]  # the Ctrl-C reaches rlsys profile
    assert main(["profile", "--out", str(out), "--", *command]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["interrupted: before the command recorded anything; no profile written"]
    assert not out.exists()


def test_ctrl_c_while_the_bootstrap_imports_is_not_a_fatal_error(tmp_path: Path) -> None:
    """Raised out of sitecustomize, it ended the profiled Python with "Fatal Python error:
    init_import_site" and a dump; now it ends as an interrupted program does."""
    own = tmp_path / "own"  # the interpreter's own sitecustomize, which the bootstrap runs
    own.mkdir()
    (own / "sitecustomize.py").write_text("raise KeyboardInterrupt\n")
    env = launch.child_environment(tmp_path / "trace", {**os.environ, "PYTHONPATH": str(own)})
    done = subprocess.run([sys.executable, "-c", "print('ran')"], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == -signal.SIGINT
    assert done.stdout == "" and done.stderr == ""


def test_ctrl_c_while_the_recording_is_read_stops(tmp_path: Path, monkeypatch, capsys) -> None:
    """Between the command's end and the writing, a first Ctrl-C was only held (as before
    the command started) and then forgotten: the profile went on to its end."""
    from rlsys.trace import Session

    load_dir = Session.load_dir

    def interrupted_load(directory, **options):
        os.kill(os.getpid(), signal.SIGINT)
        return load_dir(directory, **options)

    monkeypatch.setattr(Session, "load_dir", staticmethod(interrupted_load))
    script = tmp_path / "script.py"
    script.write_text("pass\n")
    out = tmp_path / "p"
    assert main(["profile", "--quiet", "--out", str(out), str(script)]) == 130
    assert "interrupted: while writing the profile" in capsys.readouterr().err
    assert not (out / "summary.json").exists()


def test_a_damaged_recording_is_not_blamed_on_the_interpreter(tmp_path: Path, capsys) -> None:
    """The hint asked whether the command was "run with an interpreter that has rlsys"."""
    # The command's own recording is its only file (a stray file next to a good one costs
    # only itself: test_profiler_cli.py), damaged after it was closed.
    junk = (
        "import os, rlsys; rlsys.stop_recording(); "
        "open(f\"{os.environ['RLSYS_TRACE_DIR']}/{os.getpid()}.jsonl\", 'w').write('junk')"
    )
    out = tmp_path / "p"
    assert main(["profile", "--out", str(out), "--", sys.executable, "-c", junk]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "file skipped" in err[0]
    assert err[1].startswith(f"error: no profile: {out / 'trace'}: none of its 1 *.jsonl")
    hint = f"hint: a file in {out / 'trace'} is damaged or not written by rlsys (kept there"
    assert err[2].startswith(hint) and err[2].endswith("run the profile again into a new --out DIR")
