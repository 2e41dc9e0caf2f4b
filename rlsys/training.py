"""The training loop around a compiled algorithm: progress, metrics.csv, summary."""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

import rlsys
from rlsys.algos import ALGORITHMS

COLUMNS = ["iteration", "env_steps", "episode_return", "episodes", "loss", "wall_seconds",
           "env_steps_per_second"]  # fmt: skip


def train(algo: str, config: Any, out: Path, quiet: bool = False) -> dict[str, Any]:
    """Build, compile and run `algo` with `config`, writing metrics.csv into `out`."""
    started = time.perf_counter()
    with rlsys.phase("compile"):
        built = ALGORITHMS[algo][1](config)
        per_call = config.iterations_per_call
        executable = built.program.compile(bounds=built.bounds, iterations_per_call=per_call)
    compiled = time.perf_counter()
    total = config.num_iterations * config.batch_size
    last_return = [float("nan")]
    with (out / "metrics.csv").open("w", newline="") as handle, _progress(quiet) as progress:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        task = progress.add_task("train", total=total, sps=0.0, ret=float("nan"))

        def on_iteration(i: int, outputs: dict) -> None:
            steps = (i + 1) * config.batch_size
            elapsed = time.perf_counter() - compiled
            episodes = float(outputs["episodes"])
            if episodes:
                last_return[0] = float(outputs["episode_return_sum"]) / episodes
            writer.writerow([i, steps, last_return[0], int(episodes), float(outputs["loss"]),
                             round(elapsed, 4), round(steps / elapsed, 1)])  # fmt: skip
            progress.update(task, completed=steps, sps=steps / elapsed, ret=last_return[0])
            rlsys.progress(steps, total)

        with rlsys.phase("train"):
            executable.run(on_iteration=on_iteration)
    finished = time.perf_counter()
    return {
        "env_steps": total,
        "iterations": config.num_iterations,
        "compile_seconds": round(compiled - started, 3),
        "train_seconds": round(finished - compiled, 3),
        "env_steps_per_second": round(total / (finished - compiled), 1),
        "final_episode_return": last_return[0],
    }


def _progress(quiet: bool) -> Progress:
    return Progress(
        TextColumn("[bold]train"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} steps"),
        TextColumn("{task.fields[sps]:,.0f} steps/s"),
        TextColumn("return {task.fields[ret]:.1f}"),
        TimeElapsedColumn(),
        disable=quiet,
    )
