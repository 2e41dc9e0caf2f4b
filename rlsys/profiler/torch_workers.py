"""Keep the recording of PyTorch DataLoader workers when they are terminated.

Each worker process installs torch's own SIGTERM handler (C code, at the start of its loop),
which ends the worker with `_exit(0)` when its parent sends the signal. The parent does at
exit: multiprocessing terminates its daemonic children, and persistent workers
(`persistent_workers=True`) are still alive then. `_exit` skips the finalizers that close a
worker's recording, so its events were lost. Here the worker's SIGTERM handler is replaced,
right after torch sets it, by one that closes the recording and then ends the worker as
torch's does (exit status 0, which the parent's check of its workers expects).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
from types import ModuleType
from typing import Any

from rlsys.trace import active_recorder

_PATCHED = "__rlsys_worker_handlers__"


def install(torch: ModuleType) -> None:
    """Wrap torch's worker signal setup (idempotent; a torch without it is left alone)."""
    handling = getattr(getattr(torch.utils.data, "_utils", None), "signal_handling", None)
    set_handlers = getattr(handling, "_set_worker_signal_handlers", None)
    if set_handlers is None or hasattr(set_handlers, _PATCHED):
        return

    @functools.wraps(set_handlers)
    def set_worker_signal_handlers(*args: Any, **kwargs: Any) -> Any:
        result = set_handlers(*args, **kwargs)
        if active_recorder() is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _close_and_exit)
        return result

    setattr(set_worker_signal_handlers, _PATCHED, True)
    handling._set_worker_signal_handlers = set_worker_signal_handlers


def _close_and_exit(signum: int, frame: object) -> None:
    recorder = active_recorder()
    if recorder is not None:
        with contextlib.suppress(Exception):  # exiting regardless, as torch's handler does
            recorder.close_at_signal()
    os._exit(0)
