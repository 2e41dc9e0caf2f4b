"""TensorBoard event files of a training run: one scalar per metric per iteration.

The values are those of metrics.csv; the TensorBoard step is the row's `env_steps`, so runs
with different batch sizes line up. The writer is the `tensorboard` package's own
`EventFileWriter` (TensorBoard reads what it writes; `tensorboard --logdir runs/`).

A resumed run repeats the iterations after its checkpoint. Rather than append events that
TensorBoard would have to reconcile, it deletes the folder's event files and writes a fresh
one that starts with the kept rows of metrics.csv.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path

EVENT_FILE_GLOB = "events.out.tfevents.*"
STEP_COLUMN = "env_steps"
SKIPPED = {"iteration", STEP_COLUMN}  # the step itself, and a counter of rows


class ScalarLog:
    """Scalars of `metrics.csv` rows as TensorBoard events in `folder`."""

    def __init__(self, folder: Path) -> None:
        # Imported here: only training needs it, and the CLI should start fast.
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        for old in folder.glob(EVENT_FILE_GLOB):
            old.unlink()
        self._writer = EventFileWriter(str(folder))

    def write(self, row: Mapping[str, object]) -> None:
        """One metrics row; empty values (no episode ended: no mean return) are skipped."""
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        values = [
            Summary.Value(tag=name, simple_value=float(value))
            for name, value in row.items()
            if name not in SKIPPED and value != ""
        ]
        step = int(row[STEP_COLUMN])  # type: ignore[call-overload]
        self._writer.add_event(Event(wall_time=time.time(), step=step,
                                     summary=Summary(value=values)))  # fmt: skip

    def write_rows(self, columns: list[str], rows: Iterable[list[str]]) -> None:
        for row in rows:
            self.write(dict(zip(columns, row, strict=True)))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
