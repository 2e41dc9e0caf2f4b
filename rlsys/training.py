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
from rlsys.compiler.lower.jax_program import LoopState
from rlsys.errors import UsageError
from rlsys.scalar_log import ScalarLog

COLUMNS = ["iteration", "env_steps", "episode_return", "episodes", "loss", "wall_seconds",
           "env_steps_per_second"]  # fmt: skip
CHECKPOINT = "checkpoint.npz"
FORMAT = "rlsys-checkpoint"


def save_checkpoint(path: Path, algo: str, state: LoopState) -> None:
    meta = json.dumps({"format": FORMAT, "version": 1, "algo": algo, "iterations": state.done})
    arrays = {f"carry_{k}": v for k, v in state.carry.items()}
    temporary = path.with_name(path.name + ".tmp.npz")
    np.savez(temporary, meta=np.array(meta), **arrays)
    os.replace(temporary, path)  # a crash mid-write leaves the previous checkpoint whole


# What reading a missing, truncated, empty or foreign checkpoint.npz raises.
UNREADABLE = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)


def load_checkpoint(path: Path, algo: str) -> LoopState:
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            carry = {k.removeprefix("carry_"): data[k] for k in data.files if k != "meta"}
    except UNREADABLE as err:
        hint = "resume from a folder written by `rlsys train`"
        raise UsageError(f"cannot read checkpoint {path}: {err}", hint=hint) from None
    if meta.get("format") != FORMAT or meta.get("algo") != algo:
        raise UsageError(f"{path} is not a checkpoint of {algo} (it says {meta.get('algo')!r})")
    return LoopState(int(meta["iterations"]), carry)


def checkpoint_algo(path: Path) -> str:
    """The algorithm a checkpoint.npz says it is of."""
    try:
        with np.load(path, allow_pickle=False) as data:
            algo = json.loads(str(data["meta"])).get("algo")
    except UNREADABLE as err:
        raise UsageError(f"cannot read checkpoint {path}: {err}") from None
    if algo not in ALGORITHMS:
        raise UsageError(f"{path}: unknown algorithm {algo!r} in the checkpoint")
    return algo


def _kept_rows(path: Path, before: int) -> list[list[str]]:
    """The metrics rows of the iterations a resumed run does not repeat."""
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))[1:]
    return [row for row in rows if row and int(row[0]) < before]


def _devices(config: Any) -> int | str:
    """`compile(devices=)` for --devices, with JAX's CPU backend given that many devices
    (one per core for "auto") before anything runs on it."""
    if config.devices == "1":
        return 1
    if config.devices == "auto":
        use_cpu_devices()
        return "auto"
    return use_cpu_devices(int(config.devices))


def train(algo: str, config: Any, out: Path, quiet: bool = False,
          resume: bool = False) -> dict[str, Any]:  # fmt: skip
    """Build, compile and run `algo` with `config`, writing metrics.csv and checkpoints
    into `out`; with `resume`, continue from `out/checkpoint.npz`."""
    started = time.perf_counter()
    state = load_checkpoint(out / CHECKPOINT, algo) if resume else None
    with rlsys.phase("compile"):
        devices = _devices(config)  # before building: an environment may run JAX
        built = ALGORITHMS[algo][1](config)
        executable = built.program.compile(
            bounds=built.bounds,
            iterations_per_call=config.iterations_per_call,
            segmented=SEGMENTED[config.segmented],
            devices=devices,
        )
        per_call = executable.iterations_per_call  # the compiler may choose another
    compiled = time.perf_counter()
    total = config.num_iterations * config.batch_size
    first = state.done if state else 0
    rows = _kept_rows(out / "metrics.csv", first)
    last_return: list[float | None] = [None]  # until an episode ends
    scalars = ScalarLog(out)
    scalars.write_rows(COLUMNS, rows)
    with (out / "metrics.csv").open("w", newline="") as handle, _progress(quiet) as progress:
        writer = csv.writer(handle)
        writer.writerows([COLUMNS, *rows])
        task = progress.add_task("train", total=total, sps=0.0, ret=_shown(None))

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
            row = [i, steps, mean, int(episodes), float(outputs["loss"]), round(elapsed, 4),
                   round(rate, 1)]  # fmt: skip
            writer.writerow(row)
            scalars.write(dict(zip(COLUMNS, row, strict=True)))
            progress.update(task, completed=steps, sps=rate, ret=_shown(last_return[0]))
            rlsys.progress(steps, total)

        def on_call(loop: LoopState) -> None:
            every = config.checkpoint_every
            finished = loop.done == config.num_iterations
            if finished or (every and loop.done // every > (loop.done - per_call) // every):
                handle.flush()
                scalars.flush()
                save_checkpoint(out / CHECKPOINT, algo, loop)

        with rlsys.phase("train"):
            try:
                executable.run(on_iteration=on_iteration, on_call=on_call, resume=state)
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
