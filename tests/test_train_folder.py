"""`rlsys train`'s results folder across stops: Ctrl-C and SIGTERM save a checkpoint, a
resumed run repeats nothing and loses nothing, and a new run never mixes with another's
files. All in-graph (gymnax), so a resumed run's metrics are an uninterrupted run's."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import rlsys
from rlsys.cli import main

# 16 iterations of 4 envs x 32 steps, 2 per call; checkpoints only at the end.
RUN = ["train", "a2c", "--total-steps", "2048", "--num-envs", "4", "--num-steps", "32",
       "--iterations-per-call", "2", "--checkpoint-every", "0", "--quiet"]  # fmt: skip


def _metrics(out: Path) -> list[tuple[str, ...]]:
    rows = csv.DictReader((out / "metrics.csv").open())
    return [(r["iteration"], r["episode_return"], r["episodes"], r["loss"]) for r in rows]


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("whole") / "run"
    assert main([*RUN, "--out", str(out)]) == 0
    return out


def _stop_at_step(steps: int, monkeypatch, stop) -> None:
    """Call `stop()` when training reports `steps` env steps (from inside a call's reports,
    as a signal arriving then would land)."""
    reported = rlsys.progress

    def progress(done: int, total: int) -> None:
        reported(done, total)
        if done == steps:
            stop()

    monkeypatch.setattr(rlsys, "progress", progress)


def _signal(*signals: signal.Signals):
    def send() -> None:
        for signum in signals:
            os.kill(os.getpid(), signum)

    return send


@pytest.mark.parametrize(
    ("signals", "code", "done"),
    [
        ((signal.SIGINT,), 130, 8),  # the call in progress (iterations 6 and 7) ends first
        ((signal.SIGTERM,), 143, 8),
        ((signal.SIGINT, signal.SIGINT), 130, 6),  # the second: at once, in the call
    ],
)
def test_a_stopped_run_saves_its_finished_calls_and_resumes_to_the_same_metrics(
    signals, code, done, whole: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        _stop_at_step(7 * 128, patch, _signal(*signals))  # iteration 6: the fourth call's first
        assert main([*RUN, "--out", str(out)]) == code
    err = capsys.readouterr().err
    assert f"stopped after iteration {done} of 16, saved in {out / 'checkpoint.npz'}" in err
    assert f"continue with `rlsys train a2c --resume {out}`" in err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with (out / "metrics.csv").open("a") as metrics:
        metrics.write("1")  # row 12 torn by a process killed mid-write: "1" of "12,..."
    assert main(["train", "a2c", "--resume", str(out), "--quiet"]) == 0
    assert _metrics(out) == _metrics(whole)
    assert json.loads((out / "summary.json").read_text())["resumed_at_iteration"] == done


def test_a_run_stopped_before_its_first_call_ended_starts_again(
    whole: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        _stop_at_step(128, patch, _signal(signal.SIGINT, signal.SIGINT))
        assert main([*RUN, "--out", str(out)]) == 130
    assert "stopped before the first call ended" in capsys.readouterr().err
    assert not (out / "checkpoint.npz").exists()
    assert main(["train", "a2c", "--resume", str(out), "--quiet"]) == 0
    assert _metrics(out) == _metrics(whole)


def test_a_folder_a_run_is_writing_is_refused(whole: Path, tmp_path: Path, monkeypatch,
                                              capsys) -> None:  # fmt: skip
    out = tmp_path / "run"

    def resume_meanwhile() -> None:
        assert main(["train", "a2c", "--resume", str(out), "--quiet"]) == 2

    with monkeypatch.context() as patch:
        _stop_at_step(128, patch, resume_meanwhile)
        assert main([*RUN, "--out", str(out)]) == 0
    assert f"{out}: another `rlsys train` is writing it" in capsys.readouterr().err
    assert _metrics(out) == _metrics(whole)


def test_a_new_run_needs_a_new_or_empty_folder(whole: Path, tmp_path: Path, capsys) -> None:
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    for name in ("config.toml", "metrics.csv", "checkpoint.npz"):
        (unfinished / name).write_bytes((whole / name).read_bytes())
    assert main([*RUN, "--out", str(unfinished)]) == 2
    err = capsys.readouterr().err
    assert f"--out {unfinished} holds an unfinished run of a2c" in err
    assert f"rlsys train a2c --resume {unfinished}" in err
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    (other / "events.out.tfevents.1.host").write_text("")
    assert main([*RUN, "--out", str(other)]) == 2
    assert f"--out {other} is not empty" in capsys.readouterr().err
    assert sorted(p.name for p in other.iterdir()) == ["events.out.tfevents.1.host", "notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([*RUN, "--env", "gymnax:NoSuch-v1", "--out", str(empty)]) == 2
    assert empty.is_dir() and not any(empty.iterdir())  # it failed before training


def test_a_checkpoint_that_does_not_fit_leaves_the_run_as_it_was(
    whole: Path, tmp_path: Path, capsys
) -> None:
    from rlsys.compiler.lower.jax_program import LoopState
    from rlsys.training import load_checkpoint, save_checkpoint

    out = tmp_path / "run"
    out.mkdir()
    for name in ("config.toml", "metrics.csv"):
        (out / name).write_bytes((whole / name).read_bytes())
    state = load_checkpoint(whole / "checkpoint.npz", "a2c")
    save_checkpoint(out / "checkpoint.npz", "a2c", LoopState(-5, state.carry))
    assert main(["train", "a2c", "--resume", str(out), "--quiet"]) == 2
    assert "does not match this program" in capsys.readouterr().err
    assert (out / "metrics.csv").read_bytes() == (whole / "metrics.csv").read_bytes()


def test_max_grad_norm_inf_turns_clipping_off(tmp_path: Path) -> None:
    """inf / max(norm, inf) would be NaN; a norm no gradient reaches scales by exactly 1."""
    runs = {}
    for norm in ("inf", "1e30"):
        out = tmp_path / norm
        assert main([*RUN, "--max-grad-norm", norm, "--out", str(out)]) == 0
        runs[norm] = _metrics(out)
    assert runs["inf"] == runs["1e30"]
    assert all(loss != "nan" for *_, loss in runs["inf"])
    config = tmp_path / "inf" / "config.toml"
    assert tomllib.loads(config.read_text())["max_grad_norm"] == float("inf")
    assert config.read_text().startswith("# rlsys train a2c:")
    again = tmp_path / "again"
    assert main(["train", "a2c", "--config", str(config), "--out", str(again)]) == 0
    assert _metrics(again) == runs["inf"]


def test_a_yaml_config_file(tmp_path: Path) -> None:
    config = tmp_path / "a2c.yaml"
    config.write_text("total_steps: 2048\nnum_envs: 4\nnum_steps: 32\nlearning_rate: 2e-3\n"
                      "max_grad_norm: .inf\nanneal_lr: false\n")  # fmt: skip
    out = tmp_path / "run"
    assert main(["train", "a2c", "--config", str(config), "--quiet", "--out", str(out)]) == 0
    written = tomllib.loads((out / "config.toml").read_text())
    assert written["learning_rate"] == 2e-3 and written["max_grad_norm"] == float("inf")
    assert written["anneal_lr"] is False and written["num_envs"] == 4


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        ("total_steps: [1\n", "cannot read config"),
        ("- 1\n- 2\n", "expected options as `name: value` lines"),
        ("learning_rate: fast\n", "learning_rate must be a number, not 'fast'"),
        ("num_envs: 4\nseed: 1\nnum_envs: 8\n", "option 'num_envs' is given twice (line 3)"),
    ],
)
def test_a_bad_yaml_config_is_one_line(yaml, message, tmp_path: Path, capsys) -> None:
    (tmp_path / "c.yml").write_text(yaml)
    assert main(["train", "a2c", "--config", str(tmp_path / "c.yml")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_diverged_run_stops_at_its_first_non_finite_loss(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    argv = ["train", "ppo", "--env", "gymnax:Pendulum-v1", "--learning-rate", "10",
            "--max-grad-norm", "inf", "--total-steps", "2048", "--num-envs", "4",
            "--num-steps", "32", "--quiet", "--out", str(out)]  # fmt: skip
    assert main([*argv, "--checkpoint-every", "1", "--iterations-per-call", "1"]) == 2
    err = capsys.readouterr().err
    assert "the loss is nan, so training diverged" in err and "Traceback" not in err
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert np.isnan(float(rows[-1]["loss"])) and not (out / "summary.json").exists()
    assert len(rows) == 2 and (out / "checkpoint.npz").exists()  # what it saved stays


def test_a_run_that_fails_before_its_first_checkpoint_leaves_no_folder(tmp_path: Path,
                                                                       capsys) -> None:  # fmt: skip
    """It saved nothing to resume from: the same command, corrected, can use the folder."""
    out = tmp_path / "run"
    argv = ["train", "ppo", "--env", "gymnax:Pendulum-v1", "--max-grad-norm", "inf",
            "--total-steps", "2048", "--num-envs", "4", "--num-steps", "32", "--quiet",
            "--out", str(out)]  # fmt: skip
    assert main([*argv, "--learning-rate", "1e30"]) == 2
    assert "so training diverged" in capsys.readouterr().err and not out.exists()
    out.mkdir()  # an empty folder of the user's stays, empty
    assert main([*argv, "--learning-rate", "1e30"]) == 2
    assert out.is_dir() and list(out.iterdir()) == []
    assert main([*argv, "--learning-rate", "1e-3"]) == 0


STOPPING_THEN_SIGNALLED = """
import os, signal
from rlsys.stop_signals import Stopped, StopRequests
with StopRequests() as stops:
    os.kill(os.getpid(), signal.SIGINT)  # asks to stop
    try:
        stops.check("stopped")
    except Stopped:
        os.kill(os.getpid(), signal.SIGINT)  # on the way out, as in __exit__ or at exit
        print("not ended")
"""


def test_a_signal_after_the_run_stopped_ends_the_process_without_a_traceback() -> None:
    ended = subprocess.run([sys.executable, "-c", STOPPING_THEN_SIGNALLED], capture_output=True,
                           text=True, check=False, timeout=60)  # fmt: skip
    assert ended.returncode == -signal.SIGINT and ended.stdout == ""
    assert ended.stderr.strip() == "stopping after the call in progress (once more: at once)"


def test_a_second_signal_while_the_checkpoint_is_written_waits_for_it(
    whole: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    from rlsys import training

    write = training.save_checkpoint

    def interrupted_write(path, algo, state) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the second signal, in the middle of the write
        write(path, algo, state)

    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        _stop_at_step(7 * 128, patch, _signal(signal.SIGINT))
        patch.setattr(training, "save_checkpoint", interrupted_write)
        assert main([*RUN, "--out", str(out)]) == 130
    assert f"stopped after iteration 8 of 16, saved in {out / 'checkpoint.npz'}" in (
        capsys.readouterr().err
    )
    assert sorted(p.name for p in out.iterdir() if "tmp" in p.name) == []
    assert main(["train", "a2c", "--resume", str(out), "--quiet"]) == 0
    assert _metrics(out) == _metrics(whole)
