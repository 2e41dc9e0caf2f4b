"""The training loop around a compiled algorithm: progress, metrics.csv, TensorBoard event
files (`scalar_log.py`), checkpoints.

A checkpoint (`checkpoint.npz`, NumPy's format, loaded without pickle) holds what the
iteration loop carries from one iteration to the next (parameters, optimizer moments, the
state of in-graph environments, episode trackers) and the number of iterations done. Keys are
derived from the seed and the iteration inside the program, so resuming an in-graph run
gives the metrics an uninterrupted run would have. A host (gymnasium) environment's state
lives outside the program: a resumed run starts those environments afresh.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

import rlsys
from rlsys.algos import ALGORITHMS
from rlsys.algos.config import SEGMENTED
from rlsys.compiler import use_cpu_devices
from rlsys.compiler.errors import UnsplittableError
from rlsys.compiler.lower.jax_program import LoopState
from rlsys.errors import UsageError
from rlsys.scalar_log import ScalarLog
from rlsys.stop_signals import Stopped, StopRequests

COLUMNS = ["iteration", "env_steps", "episode_return", "episodes", "loss", "wall_seconds",
           "env_steps_per_second"]  # fmt: skip
CHECKPOINT = "checkpoint.npz"
FORMAT = "rlsys-checkpoint"


def save_checkpoint(path: Path, algo: str, state: LoopState) -> None:
    meta = json.dumps({"format": FORMAT, "version": 1, "algo": algo, "iterations": state.done})
    arrays = {f"carry_{k}": v for k, v in state.carry.items()}
    temporary = path.with_name(path.name + ".tmp.npz")
    try:
        np.savez(temporary, meta=np.array(meta), **arrays)
        os.replace(temporary, path)  # a crash mid-write leaves the previous checkpoint whole
    except OSError as err:
        temporary.unlink(missing_ok=True)
        raise UsageError(f"cannot write checkpoint {path}: {err.strerror or err}",
                         hint="free some disk space, then --resume the run") from None  # fmt: skip


# What reading a missing, truncated, empty or foreign checkpoint.npz raises.
UNREADABLE = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)


def _unreadable(path: Path, err: BaseException) -> UsageError:
    why = str(err)
    if "pickle" in why:  # NumPy's advice to load it unsafely; rlsys never unpickles a file
        why = "it is not an npz archive of arrays"
    return UsageError(f"cannot read checkpoint {path}: {why}",
                      hint="use a folder written by `rlsys train`")  # fmt: skip


def load_checkpoint(path: Path, algo: str) -> LoopState:
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            carry = {k.removeprefix("carry_"): data[k] for k in data.files if k != "meta"}
    except UNREADABLE as err:
        raise _unreadable(path, err) from None
    if meta.get("format") != FORMAT or meta.get("algo") != algo:
        raise UsageError(f"{path} is not a checkpoint of {algo} (it says {meta.get('algo')!r})")
    if type(meta.get("iterations")) is not int:
        raise UsageError(f"{path}: its iteration count {meta.get('iterations')!r} is not one")
    return LoopState(meta["iterations"], carry)


def checkpoint_algo(path: Path) -> str:
    """The algorithm a checkpoint.npz says it is of."""
    try:
        with np.load(path, allow_pickle=False) as data:
            algo = json.loads(str(data["meta"])).get("algo")
    except UNREADABLE as err:
        raise _unreadable(path, err) from None
    if algo not in ALGORITHMS:
        raise UsageError(f"{path}: unknown algorithm {algo!r} in the checkpoint")
    return algo


def _kept_rows(path: Path, before: int) -> list[list[str]]:
    """The metrics rows of the iterations a resumed run does not repeat."""
    if not path.exists():
        return []
    with path.open(newline="", errors="replace") as handle:
        rows = list(csv.reader(handle))[1:]
    # A process killed mid-write leaves a torn last row (any bytes): whole rows only.
    whole = [row for row in rows if len(row) == len(COLUMNS) and row[0].isdigit()]
    return [row for row in whole if int(row[0]) < before]


def _devices(config: Any) -> int | str:
    """`compile(devices=)` for --devices, with JAX's CPU backend given that many devices
    (one per core for "auto") before anything runs on it."""
    if config.devices == "1":
        return 1
    if config.devices == "auto":
        use_cpu_devices()
        return "auto"
    return use_cpu_devices(int(config.devices))


def train(algo: str, config: Any, out: Path, quiet: bool = False, resume: bool = False,
          stops: StopRequests | None = None) -> dict[str, Any]:  # fmt: skip
    """Build, compile and run `algo` with `config`, writing metrics.csv and checkpoints
    into `out`; with `resume`, continue from `out/checkpoint.npz`. Ctrl-C or SIGTERM stops
    it after the call in progress, checkpointed (`Stopped`, `rlsys/stop_signals.py`):
    `stops`, the CLI's, or its own."""
    if stops is not None:
        return _train(algo, config, out, quiet, resume, stops)
    with StopRequests() as own:
        return _train(algo, config, out, quiet, resume, own)


def _train(algo: str, config: Any, out: Path, quiet: bool, resume: bool,
           stops: StopRequests) -> dict[str, Any]:  # fmt: skip
    started = time.perf_counter()
    # A run stopped before its first checkpoint starts again from iteration 0.
    state = (
        load_checkpoint(out / CHECKPOINT, algo) if resume and (out / CHECKPOINT).exists() else None
    )
    with rlsys.phase("compile"):
        devices = _devices(config)  # before building: an environment may run JAX
        built = ALGORITHMS[algo][1](config)
        try:
            executable = built.program.compile(
                bounds=built.bounds,
                iterations_per_call=config.iterations_per_call,
                segmented=SEGMENTED[config.segmented],
                devices=devices,
            )
        except UnsplittableError as err:
            raise _unsplittable(algo, config, err) from None
        per_call = executable.iterations_per_call  # the compiler may choose another
    compiled = time.perf_counter()
    stops.check("stopped before training started")
    if state is not None:
        executable.check_resume(state)  # before the files of the run are cut back to it
    total = config.num_iterations * config.batch_size
    first = state.done if state else 0
    rows = _kept_rows(out / "metrics.csv", first)
    # The last mean episode return so far (none until an episode ends).
    last_return = [next((float(row[2]) for row in reversed(rows) if row[2]), None)]
    # wall_seconds goes on from the run's last row: the training time of the whole run.
    before = _float(rows[-1][5]) if rows else 0.0
    latest = [state]  # the loop state after the last call, and the last one saved
    saved = [state]
    scalars = ScalarLog(out)
    scalars.write_rows(COLUMNS, rows)
    with (out / "metrics.csv").open("w", newline="") as handle, _progress(quiet) as progress:
        writer = csv.writer(handle)
        writer.writerows([COLUMNS, *rows])
        task = progress.add_task("train", total=total, sps=0.0, ret=_shown(last_return[0]))

        def on_iteration(i: int, outputs: dict) -> None:
            for name, (what, hint) in built.stops.items():
                if float(outputs[name]) > 0:
                    raise UsageError(f"iteration {i}: {what}", hint=hint)
            steps = (i + 1) * config.batch_size
            elapsed = time.perf_counter() - compiled
            episodes = float(outputs["episodes"])
            mean = float(outputs["episode_return_sum"]) / episodes if episodes else ""
            last_return[0] = mean if episodes else last_return[0]
            rate = (steps - first * config.batch_size) / elapsed
            loss = float(outputs["loss"])
            row = [i, steps, mean, int(episodes), loss, round(before + elapsed, 4), round(rate, 1)]
            writer.writerow(row)
            scalars.write(dict(zip(COLUMNS, row, strict=True)))
            progress.update(task, completed=steps, sps=rate, ret=_shown(last_return[0]))
            rlsys.progress(steps, total)
            if not math.isfinite(loss):
                raise UsageError(f"iteration {i}: the loss is {loss}, so training diverged",
                                 hint="lower --learning-rate, or --max-grad-norm")  # fmt: skip

        def save(loop: LoopState) -> None:
            with stops.deferred():  # no signal leaves it half-written
                handle.flush()
                scalars.flush()
                save_checkpoint(out / CHECKPOINT, algo, loop)
                saved[0] = loop

        def on_call(loop: LoopState) -> None:
            latest[0] = loop
            every = config.checkpoint_every
            finished = loop.done == config.num_iterations
            periodic = every and loop.done // every > (loop.done - per_call) // every
            if finished or periodic or stops.requested:
                save(loop)
            stops.check(_stopped(algo, out, loop, config.num_iterations))

        with rlsys.phase("train"):
            try:
                executable.run(on_iteration=on_iteration, on_call=on_call, resume=state)
            except KeyboardInterrupt as err:  # Stopped, or a Ctrl-C outside the main thread
                if latest[0] is not None and latest[0] is not saved[0]:
                    save(latest[0])  # stopped at once, in a call: the calls before it
                message = _stopped(algo, out, latest[0], config.num_iterations)
                raise Stopped(message, getattr(err, "exit_code", 130)) from None
            finally:
                scalars.close()
    finished = time.perf_counter()
    steps_run = total - first * config.batch_size
    return {
        "env_steps": total,
        "iterations": config.num_iterations,
        "resumed_at_iteration": first,
        "compile_seconds": round(compiled - started, 3),
        "train_seconds": round(finished - compiled, 3),
        "env_steps_per_second": round(steps_run / max(finished - compiled, 1e-9), 1),
        "final_episode_return": last_return[0],
        "placement": executable.placement,  # where the iterations ran (--devices)
    }


def _unsplittable(algo: str, config: Any, err: UnsplittableError) -> UsageError:
    """--devices N for a program that cannot split, in the user's terms: the compiler's
    reasons name nodes of the program, for its developers."""
    if err.host_ops:
        why = "its environments run on the host (gymnax and trivial ones split)"
    else:
        why = ("its update reads every environment's steps together (A2C and REINFORCE "
               "split; PPO's shuffled minibatches and DQN's replay do not)")  # fmt: skip
    return UsageError(f"--devices {config.devices}: {algo} on {config.env} cannot be split "
                      f"over devices: {why}",
                      hint="train with --devices 1, or auto to split where it can")  # fmt: skip


def _stopped(algo: str, out: Path, state: LoopState | None, iterations: int) -> str:
    """What a stopped run saved, and how to go on."""
    resume = f"rlsys train {algo} --resume {out}"
    if state is None:
        return f"stopped before the first call ended; `{resume}` starts it again"
    return (f"stopped after iteration {state.done} of {iterations}, saved in "
            f"{out / CHECKPOINT}; continue with `{resume}`")  # fmt: skip


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def _shown(mean_return: float | None) -> str:
    """The last mean episode return, or a dash before any episode has ended."""
    return "—" if mean_return is None else f"{mean_return:.1f}"


def _progress(quiet: bool) -> Progress:
    return Progress(
        TextColumn("[bold]train"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} steps"),
        TextColumn("{task.fields[sps]:,.0f} steps/s"),
        TextColumn("return {task.fields[ret]}"),
        TimeElapsedColumn(),
        disable=quiet,
    )
