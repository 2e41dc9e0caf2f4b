"""`rlsys profile -- COMMAND` and `rlsys report DIR [DIR2]`, end to end on small scripts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlsys.cli import main
from rlsys.profiler import hooks
from rlsys.profiler.summary import load_summary
from rlsys.trace import Session

RL_SCRIPT = """
    import gymnasium as gym
    import torch

    torch.manual_seed(0)
    env = gym.make("CartPole-v1")
    policy = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2))
    optimizer = torch.optim.SGD(policy.parameters(), lr=1e-3)
    obs, _ = env.reset(seed=0)
    for step in range(300):
        with torch.no_grad():
            action = int(policy(torch.as_tensor(obs)).argmax())
        obs, reward, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()
        if step % 20 == 19:
            loss = policy(torch.randn(64, 4)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
"""

ANNOTATED_THEN = """
    import sys
    import rlsys
    with rlsys.operation("work"):
        pass
"""


def write_script(directory: Path, source: str, name: str = "script.py") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(source))
    return path


@pytest.fixture(scope="module")
def rl_profile(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """One profile of the RL script, shared by the tests that only read it."""
    tmp = tmp_path_factory.mktemp("rl")
    script = write_script(tmp, RL_SCRIPT)
    out = tmp / "profile"
    code = main(["profile", "--out", str(out), "--", sys.executable, str(script)])
    return out, code


def test_profile_writes_summary_trace_and_plot(rl_profile, capsys) -> None:
    out, code = rl_profile
    assert code == 0
    summary = load_summary(out)
    assert summary["complete"] and summary["exit_code"] == 0
    for name in hooks.OPERATIONS:
        row = summary["operations"][name]
        assert row["calls"] > 0 and row["seconds"] > 0
        # One thread: its categories split the operation's wall time.
        assert sum(row["categories"].values()) == pytest.approx(row["seconds"])
    operations = summary["operations"]
    assert operations["simulation"]["categories"]["simulator"] > 0
    for name in ("inference", "backpropagation"):
        assert operations[name]["categories"]["backend"] > 0
    assert sum(r["seconds"] for r in summary["operations"].values()) == pytest.approx(
        summary["total"]["seconds"]
    )
    assert summary["operations"]["simulation"]["calls"] >= 300
    assert len(summary["processes"]) == 1
    trace = json.loads((out / "trace.json").read_text())
    assert {e["name"] for e in trace["traceEvents"]} >= set(hooks.OPERATIONS)
    assert (out / "breakdown.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert Session.load_dir(out / "trace").complete


def test_report_reprints_the_table(rl_profile, tmp_path: Path, capsys) -> None:
    out, _ = rl_profile
    assert main(["report", str(out), "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    for name in (*hooks.OPERATIONS, "% of total", "complete", "Categories come from"):
        assert name in text
    assert (tmp_path / "breakdown.png").is_file()


def test_exit_code_passes_through_and_the_profile_is_still_written(tmp_path: Path) -> None:
    script = write_script(tmp_path, ANNOTATED_THEN + "    sys.exit(3)\n")
    assert main(["profile", "--quiet", "--out", str(tmp_path / "p"), "--", str(script)]) == 3
    summary = load_summary(tmp_path / "p")
    assert summary["exit_code"] == 3 and summary["complete"]  # a whole run that failed
    assert list(summary["operations"]) == ["work"]  # the only event: it spans the trace


def test_a_stray_file_in_the_trace_folder_costs_only_itself(tmp_path: Path, capsys) -> None:
    stray = "    import os\n    open(os.environ['RLSYS_TRACE_DIR'] + '/notes.jsonl', 'w')\n"
    script = write_script(tmp_path, ANNOTATED_THEN + stray)
    assert main(["profile", "--quiet", "--out", str(tmp_path / "p"), "--", str(script)]) == 0
    assert list(load_summary(tmp_path / "p")["operations"]) == ["work"]
    warnings = capsys.readouterr().err.strip().splitlines()
    assert len(warnings) == 1
    assert "notes.jsonl: not an rlsys-trace file" in warnings[0]  # (empty)


OUTLIVED_BY_ITS_CHILD = """
    import subprocess, sys
    late = "import time, rlsys\\nwith rlsys.operation('after-the-command'):\\n    time.sleep(0.5)"
    subprocess.Popen([sys.executable, "-c", late])
"""


def test_a_process_outliving_the_command_is_waited_for(tmp_path: Path) -> None:
    """Its trace was read before it was closed (multiprocessing's forkserver and resource
    tracker, which end just after the command, made profiles partial now and then)."""
    script = write_script(tmp_path, OUTLIVED_BY_ITS_CHILD)
    out = tmp_path / "p"
    assert main(["profile", "--quiet", "--out", str(out), "--", sys.executable, str(script)]) == 0
    summary = load_summary(out)
    assert summary["complete"]
    assert summary["operations"]["after-the-command"]["calls"] == 1


def test_an_uncaught_exception_exits_1(tmp_path: Path, capfd) -> None:
    script = write_script(tmp_path, ANNOTATED_THEN + "    raise ValueError('boom')\n")
    assert main(["profile", "--out", str(tmp_path / "p"), "--", str(script)]) == 1
    summary = load_summary(tmp_path / "p")
    assert summary["exit_code"] == 1 and summary["complete"]
    captured = capfd.readouterr()
    assert "ValueError: boom" in captured.err
    assert "the command exited with code 1" in captured.out


LOOP_FOREVER = """
    import time
    import rlsys
    print("ready", flush=True)
    while True:
        with rlsys.operation("work"):
            time.sleep(0.005)
"""


def test_max_seconds_stops_the_command_and_keeps_a_partial_profile(tmp_path: Path, capsys) -> None:
    script = write_script(tmp_path, LOOP_FOREVER)
    out = tmp_path / "p"
    started = time.monotonic()
    code = main(["profile", "--max-seconds", "1", "--out", str(out), "--", str(script)])
    assert code == 0  # stopping at the limit is what was asked for
    assert time.monotonic() - started < 10
    summary = load_summary(out)
    assert summary["stopped_by"] == "max-seconds" and not summary["complete"]
    assert summary["exit_code"] == 130  # the child ended on the forwarded SIGINT
    assert summary["operations"]["work"]["calls"] > 0
    Session.load_dir(out / "trace")
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    assert "PARTIAL profile (stopped at --max-seconds)" in capsys.readouterr().out


WITH_A_WORKER = """
import pathlib, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(0.05)"])
pathlib.Path(sys.argv[1]).write_text(str(worker.pid))
while True:
    time.sleep(0.05)
"""


def test_max_seconds_stops_the_commands_own_workers_too(tmp_path: Path) -> None:
    """The stop goes to the command's descendants as well: its worker, a process of its own
    that a terminal's Ctrl-C would reach, was left running (re-parented to init)."""
    import psutil

    script = write_script(tmp_path, WITH_A_WORKER)
    pid_file = tmp_path / "worker.pid"
    argv = ["profile", "--quiet", "--max-seconds", "2", "--out", str(tmp_path / "p"), "--",
            str(script), str(pid_file)]  # fmt: skip
    assert main(argv) == 0
    worker = int(pid_file.read_text())
    gone = not psutil.pid_exists(worker) or psutil.Process(worker).status() == "zombie"
    if not gone:
        os.kill(worker, signal.SIGKILL)
    assert gone


def test_sigint_is_forwarded_and_the_profile_is_partial(tmp_path: Path) -> None:
    script = write_script(tmp_path, LOOP_FOREVER)
    out = tmp_path / "p"
    profiler = subprocess.Popen(
        [sys.executable, "-m", "rlsys.cli", "profile", "--quiet", "--out", str(out), "--",
         str(script)],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert profiler.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        os.kill(profiler.pid, signal.SIGINT)
        profiler.communicate(timeout=60)
    finally:
        profiler.kill()
    assert profiler.returncode == 130
    summary = load_summary(out)
    assert summary["stopped_by"] == "interrupt" and not summary["complete"]
    assert summary["operations"]["work"]["calls"] > 0


def test_a_command_that_ignores_sigint_is_sent_sigterm_at_the_third(tmp_path: Path) -> None:
    script = write_script(tmp_path, "import signal\nsignal.signal(signal.SIGINT, "
                          "signal.SIG_IGN)\n" + textwrap.dedent(LOOP_FOREVER))  # fmt: skip
    out = tmp_path / "p"
    profiler = subprocess.Popen(
        [sys.executable, "-m", "rlsys.cli", "profile", "--quiet", "--out", str(out), "--",
         str(script)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert profiler.stdout.readline().strip() == "ready"
        for _ in range(3):
            os.kill(profiler.pid, signal.SIGINT)
            time.sleep(0.3)
        _, err = profiler.communicate(timeout=60)
    finally:
        profiler.kill()
    assert profiler.returncode == 128 + signal.SIGTERM
    assert "the command goes on: SIGTERM (once more: SIGKILL)" in err
    assert load_summary(out)["stopped_by"] == "interrupt"


def test_report_compares_two_profiles(rl_profile, tmp_path: Path, capsys) -> None:
    out, _ = rl_profile
    other = tmp_path / "other"
    script = write_script(tmp_path, ANNOTATED_THEN)
    assert main(["profile", "--quiet", "--out", str(other), "--", str(script)]) == 0
    capsys.readouterr()
    assert main(["report", str(out), str(other)]) == 0
    text = capsys.readouterr().out
    assert "per-operation seconds" in text
    for name in (*hooks.OPERATIONS, "work", "total"):
        assert name in text
    assert "x" in text.split("total")[-1]  # the ratio column of the total row


def test_a_summary_with_a_field_missing_or_out_a_file_is_one_line(rl_profile, tmp_path: Path,
                                                                  capsys) -> None:  # fmt: skip
    out, _ = rl_profile
    summary = json.loads((out / "summary.json").read_text())
    for field, value in (("note", None), ("processes", None), ("wall_seconds", "soon")):
        damaged = tmp_path / field
        damaged.mkdir()
        if value is None:
            del summary[field]
        else:
            summary[field] = value
        (damaged / "summary.json").write_text(json.dumps(summary))
        summary = json.loads((out / "summary.json").read_text())
        assert main(["report", str(damaged), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert "a field is missing or invalid" in err and "Traceback" not in err
    (tmp_path / "file").write_text("")
    assert main(["report", str(out), "--out", str(tmp_path / "file")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    other = tmp_path / "other-profile"
    other.mkdir()
    (other / "summary.json").write_text("{}")  # another profile's, or another tool's
    assert main(["report", str(out), "--out", str(other)]) == 2
    assert "holds another profile, whose report this would replace" in capsys.readouterr().err
    assert main(["profile", "--out", str(other), "--", "python", "-c", "pass"]) == 2
    assert "already holds a profile" in capsys.readouterr().err
    assert (other / "summary.json").read_text() == "{}"
    blocked = tmp_path / "blocked"
    (blocked / "breakdown.png").mkdir(parents=True)  # a folder where the plot goes
    assert main(["report", str(out), "--out", str(blocked), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(f"error: cannot write {blocked / 'breakdown.png'}: Is a directory")
    assert err[1].startswith("hint: free some disk space, or pass another --out") and len(err) == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "{tmp}/missing"],
        ["report", "{tmp}"],
        ["profile", "--out", "{tmp}/p", "--", "rlsys-no-such-command"],
        ["profile", "--out", "{tmp}/p", "--", "python", "{tmp}/no_such_script.py"],
    ],
    ids=["missing dir", "not a profile", "command not found", "script not found"],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], tmp_path: Path, capsys) -> None:
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("error: ") and err[1].startswith("hint: ")


def test_a_profile_that_could_not_start_leaves_no_folder(tmp_path: Path, capsys) -> None:
    out = tmp_path / "p"
    assert main(["profile", "--out", str(out), "--", "rlsys-no-such-command"]) == 2
    assert main(["profile", "--out", str(out), "--calibrate", "--calibration-runs", "0", "--",
                 "python", "-c", "pass"]) == 2  # fmt: skip
    assert "cannot start" in capsys.readouterr().err and not out.exists()


def test_profile_without_a_command_is_a_usage_error(capsys) -> None:
    assert main(["profile", "--"]) == 2
    err = capsys.readouterr().err
    assert "needs a command" in err and "hint:" in err


def test_options_after_the_commands_first_word_are_the_commands(tmp_path: Path, capfd) -> None:
    """As with pyinstrument and py-spy: `--` is optional, and an option after the command's
    first word is the command's, even one rlsys has too; --help says so."""
    script = write_script(tmp_path, "import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    out = tmp_path / "p"
    argv = ["profile", "--quiet", "--out", str(out), str(script), "--out", "X", "--quiet"]
    assert main(argv) == 0
    assert json.loads(capfd.readouterr().out.splitlines()[0]) == ["--out", "X", "--quiet"]
    assert load_summary(out)["command"][1:] == [str(script), "--out", "X", "--quiet"]
    with pytest.raises(SystemExit):
        main(["profile", "--help"])
    help_text = " ".join(capfd.readouterr().out.split())
    assert "[--] COMMAND" in help_text and "a `--` before it is optional" in help_text
