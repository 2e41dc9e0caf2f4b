"""Backend time of PyTorch: an interval around each outermost torch call.

`install(torch)` pushes a `torch.overrides.TorchFunctionMode` on the importing thread's mode
stack and never pops it. From then on every torch function and Tensor method called from
Python on that thread (`torch.matmul`, `F.linear`, `x.sum()`, `Tensor.backward`,
`torch._foreach_add_` in an optimizer, ...) goes through `__torch_function__`, which records
one BACKEND event from just before to just after the call. PyTorch pops the mode while its
handler runs, so torch calls made inside a torch call (a functional that calls other
functionals, the autograd engine running backward kernels) are not intercepted again: the
interval is that of the outermost call, and the whole of `backward()`, autograd engine
included, is Backend. Python code between torch calls (a module's `forward`, a
distribution's checks) stays Python.

Why this interception point: it is the Python/C boundary of torch (what RL-Scope hooks), it
needs no C extension, and it is public API. Its cost, about 2 us per intercepted call on a
busy 2-core machine, is the price of the ccalls source and is calibrated
(`rlsys.profiler.calibrate`). A lower-level `TorchDispatchMode` would see every aten op
(several per Python call, including those inside backward) at a higher cost per op.

Limits: modes are per thread, so torch calls on threads other than the one that imported
torch are not recorded (their time is Python); code under `torch.compile` tracing sees the
mode and may compile differently.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from rlsys.trace import Category, active_recorder

BACKEND = str(Category.BACKEND)


def install(torch: ModuleType) -> None:
    """Push the recording mode on this thread (once per process)."""
    mode_class = _mode_class(torch)
    if getattr(torch, "__rlsys_backend_mode__", None) is None:
        mode = mode_class()
        mode.__enter__()  # stays pushed for the life of the process, on purpose
        torch.__rlsys_backend_mode__ = mode


def _mode_class(torch: ModuleType) -> type:
    base = torch.overrides.TorchFunctionMode

    class BackendIntervals(base):  # type: ignore[misc, valid-type]
        """Records one BACKEND event per outermost torch call while a recorder is active.

        Per call it pays two clock reads and one `emit_raw`; what depends only on the
        recorder (its clock, this thread's id) is looked up once per recorder, not per call.
        """

        recorder: Any = None

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
            recorder = active_recorder()
            if recorder is None:
                return func(*args, **kwargs) if kwargs else func(*args)
            if recorder is not self.recorder:
                self._bind(recorder)
            clock = self.clock
            start = clock()
            try:
                return func(*args, **kwargs) if kwargs else func(*args)
            finally:
                self.emit(getattr(func, "__name__", "torch"), BACKEND, start, clock(), self.tid)

        def _bind(self, recorder: Any) -> None:
            # A new recorder: the first one, or a forked child's (whose thread id differs).
            self.recorder = recorder
            self.clock = recorder.clock
            self.emit = recorder.emit_raw
            self.tid = recorder.thread_state().tid

    return BackendIntervals
