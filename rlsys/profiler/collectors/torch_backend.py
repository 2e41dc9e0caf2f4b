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
needs no C extension, and it is public API. A lower-level `TorchDispatchMode` would see every
aten op (several per Python call, including those inside backward) at a higher cost per op.

Cost (thread CPU time on a busy 2-core machine, min of 9 interleaved rounds): the mode's
dispatch itself, paid by every intercepted call, recorded or not, is about 1.1 to 1.5 us;
recording an interval adds about 0.6 us (two clock reads, a dict lookup for its name, a list
append into `Recorder.interval_buffer`, and its JSON line at the next flush). Metadata reads
are cheaper than that to run: Tensor properties such as `.grad`, `.shape`, `.device`,
methods such as `dim()`, `size()`, `is_complex()` take 60 to 210 ns (`len(t)`, a Python
method, 460 ns), and so does `torch._C._set_grad_enabled` (what `torch.no_grad()` calls).
They are not recorded (`TRIVIAL_*` below), so their time, under 0.5 us each, is Python. In
the CleanRL-style PPO they are a quarter of the intercepted calls (Adam's per-parameter loop
alone reads `.grad` 96 times per minibatch). The ccalls cost per event that calibration
measures (`rlsys.profiler.calibrate`) includes the dispatch of these unrecorded calls,
spread over the recorded ones.

Limits: modes are per thread, so torch calls on threads other than the one that imported
torch are not recorded (their time is Python); code under `torch.compile` tracing sees the
mode and may compile differently.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from rlsys.trace import Category
from rlsys.trace.annotate import _Active

BACKEND = str(Category.BACKEND)

TRIVIAL_GETTERS = (
    "grad", "shape", "dtype", "device", "requires_grad", "is_leaf", "grad_fn", "ndim",
    "layout", "is_sparse", "is_cuda", "is_meta", "is_quantized", "is_nested", "output_nr",
    "_version",
)  # fmt: skip
"""Tensor properties that read metadata (no kernel, no allocation): not recorded."""

TRIVIAL_METHODS = (
    "dim", "size", "stride", "numel", "__len__", "is_complex", "is_floating_point",
    "is_contiguous", "element_size", "get_device", "data_ptr",
)  # fmt: skip
"""Tensor methods that read metadata: not recorded."""

TRIVIAL_FUNCTIONS = ("is_complex", "is_floating_point", "numel", "_C._set_grad_enabled")
"""torch functions that read metadata, or set the grad-mode flag (`torch.no_grad()`)."""


def install(torch: ModuleType) -> None:
    """Push the recording mode on this thread (once per process)."""
    mode_class = _mode_class(torch)
    if getattr(torch, "__rlsys_backend_mode__", None) is None:
        mode = mode_class()
        mode.__enter__()  # stays pushed for the life of the process, on purpose
        torch.__rlsys_backend_mode__ = mode


def trivial_calls(torch: ModuleType) -> list[Any]:
    """The `func`s `__torch_function__` receives for the trivial calls above."""
    found = []
    for name in TRIVIAL_GETTERS:
        descriptor = getattr(torch.Tensor, name, None)
        if hasattr(descriptor, "__get__"):
            found.append(descriptor.__get__)  # equal (and same hash) to the one torch passes
    found += [getattr(torch.Tensor, name, None) for name in TRIVIAL_METHODS]
    for path in TRIVIAL_FUNCTIONS:
        function = torch
        for name in path.split("."):
            function = getattr(function, name, None)
        found.append(function)
    return [f for f in found if f is not None]


def _mode_class(torch: ModuleType) -> type:
    base = torch.overrides.TorchFunctionMode
    trivial = trivial_calls(torch)

    class BackendIntervals(base):  # type: ignore[misc, valid-type]
        """Records one BACKEND interval per outermost torch call while a recorder is active.

        Per recorded call it pays two clock reads, one dict lookup (the event name, or ""
        for a trivial call) and a list append into the recorder's interval buffer; what
        depends only on the recorder (its clock, buffer, this thread's id) is looked up
        once per recorder, not per call.
        """

        recorder: Any = None

        def __init__(self) -> None:
            super().__init__()
            self.names: dict[Any, str] = dict.fromkeys(trivial, "")

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
            recorder = _Active.recorder  # not active_recorder(): saves a call per torch call
            if recorder is None:  # installed, nothing recording (also before any recorder)
                return func(*args, **kwargs) if kwargs else func(*args)
            if recorder is not self.recorder:
                self._bind(recorder)
            try:
                name = self.names[func]
            except KeyError:
                name = self.names[func] = getattr(func, "__name__", "torch")
            except TypeError:  # an unhashable callable
                name = "torch"
            if not name:  # trivial: cheaper to run than to record; its time stays Python
                return func(*args, **kwargs) if kwargs else func(*args)
            clock = self.clock
            start = clock()
            try:
                return func(*args, **kwargs) if kwargs else func(*args)
            finally:
                intervals = self.intervals
                intervals.append((name, start, clock()))
                if len(intervals) >= self.flush_every:
                    recorder.flush()

        def _bind(self, recorder: Any) -> None:
            # A new recorder: the first one, or a forked child's (whose thread id differs).
            self.recorder = recorder
            self.clock = recorder.clock
            self.flush_every = recorder.flush_every
            self.intervals = recorder.interval_buffer(BACKEND, recorder.thread_state().tid)

    return BackendIntervals
