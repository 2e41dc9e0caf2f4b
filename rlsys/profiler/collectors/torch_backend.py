"""Backend time of PyTorch: an interval around each call into torch's native code.

`install(torch)` replaces, once per process, the C-implemented callables through which
Python code enters torch by thin Python wrappers that record one BACKEND interval per call
(from just before to just after it):

- the C functions of the namespaces in `NAMESPACES` (`torch.tanh`, `torch.cat`,
  `torch._foreach_add_` in an optimizer, `F.linear`, `torch._C._nn.mse_loss`,
  `torch._VF.einsum`, `torch.linalg.vector_norm`, ...);
- `torch.Tensor`'s methods (`x.sum()`, `x.add_(y)`, the operators `x + y`, `x[i]`, ...);
- the autograd engine's `run_backward`, which both `Tensor.backward()` and
  `torch.autograd.grad` end in: the whole backward pass is one interval.

Python code of torch between those calls (a `Module.forward`, `F.softmax`'s argument
handling, a distribution's checks, an optimizer's loop) stays Python, which is RL-Scope's
meaning of the categories: Backend is time inside the framework's native code.

Why wrappers, not a `TorchFunctionMode`: a mode sends every torch call through
`__torch_function__`, recorded or not, at about 2 us per call on a busy 2-core machine
(metadata reads such as `.grad`, `.shape` and `dim()` included). Recording the CleanRL-style
PPO's torch calls in-process (7 interleaved rounds of 4096 env steps, process time, medians)
made its loop 1.58x slower with a mode and 1.14x with these wrappers. A wrapper costs about
0.5 us per recorded call (two clock reads, a dict lookup for the thread's buffer, three
integers appended to `Recorder.interval_buffer`, written packed at the next flush) and
nothing for the calls it leaves alone: metadata reads (`TRIVIAL_*`, tensor properties),
which take 60 to 460 ns, cheaper to run than to record, so their time is Python.

Installing wraps about 2,200 callables in about 0.15 s. With no recorder active, a wrapper
costs one attribute test, and the hooks install the wrappers only while `rlsys profile`
records, never in a program that merely has the hooks.

Nesting: native code that calls back into Python which calls torch (a custom autograd
Function's Python `backward`, a `__torch_function__` override) gives nested intervals; both
are Backend, and the breakdown merges overlapping intervals of one category.

Limits: code that bound a function by name while torch itself was being imported (`from
torch import tanh` in a torch submodule) keeps the original, whose calls are not recorded
(their time is Python);
`torch.jit.script` sees the wrappers as the builtins they wrap (registered below);
`torch.compile` traces into the wrappers and breaks its graph at them (a compiled
`nn.Sequential` profiled with them gave the right outputs, with dynamo warning that it cannot
trace `get_ident`, `monotonic_ns` and the wrapped builtins), so while it is profiled,
compiled code runs as smaller graphs with eager calls between them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from threading import get_ident
from types import BuiltinFunctionType, FunctionType, ModuleType
from typing import Any

from rlsys.trace import Category
from rlsys.trace.annotate import _Active

BACKEND = str(Category.BACKEND)

NAMESPACES = ("", "_VF", "nn.functional", "_C._nn", "linalg", "special", "fft")
"""Modules (relative to `torch`) whose C functions are wrapped."""

TRIVIAL_METHODS = (
    "dim", "size", "stride", "numel", "is_complex", "is_floating_point", "is_contiguous",
    "element_size", "get_device", "data_ptr", "type", "storage_offset", "ndimension",
    "nelement", "is_set_to", "is_same_size", "is_nonzero",
)  # fmt: skip
"""Tensor methods that read metadata: not wrapped (tensor properties never are)."""

TRIVIAL_FUNCTIONS = ("numel", "promote_types", "result_type", "can_cast", "typename")
"""torch functions that read metadata (and every `is_*`, `get_*`, `set_*`, `has_*` one)."""

OPERATORS = re.compile(
    r"__(r|i)?(add|sub|mul|div|truediv|floordiv|mod|pow|matmul|and|or|xor|lshift|rshift)__"
    r"|__(eq|ne|lt|le|gt|ge|neg|pos|abs|invert|getitem|setitem)__"
)
"""The Tensor dunder methods that compute (arithmetic, comparison, indexing)."""

PYTHON_METHODS = ("split", "norm", "unique", "unique_consecutive", "stft", "istft", "lu",
                  "unflatten", "resize", "resize_as", "to_sparse_coo")  # fmt: skip
"""Tensor methods written in Python whose work is native (they call unwrapped C methods)."""

_INSTALLED = "__rlsys_backend_wrappers__"  # on the torch module: [(owner, name, original)]
_NAMES: list[str] = []
"""Event names by code: each wrapper appends the code of its name to the interval buffer."""
_CODES: dict[str, int] = {}
"""Code by event name: reinstalling (`hooks.record_ccalls`) reuses the codes it has."""
_SINKS: dict[int, tuple[Any, Callable[[], int], Any, int]] = {}
"""Per thread (`get_ident()`): (recorder, its clock, this thread's interval buffer, the
buffer's length at which to flush)."""


def install(torch: ModuleType) -> None:
    """Wrap torch's entry points (once per process; `uninstall` restores them)."""
    if getattr(torch, _INSTALLED, None) is not None:
        return
    builtins = getattr(getattr(torch, "jit", None), "_builtins", None)
    if builtins is not None:
        builtins._get_builtin_table()  # built from the namespaces while they hold originals
    replaced = []
    for owner, name, original, event in _targets(torch):
        wrapper = _wrap(original, event)
        # Where the wrapper lives: pickling by reference looks it up there.
        wrapper.__module__ = owner.__name__ if isinstance(owner, ModuleType) else owner.__module__
        wrapper.__qualname__ = name if isinstance(owner, ModuleType) else f"Tensor.{name}"
        setattr(owner, name, wrapper)
        replaced.append((owner, name, original, wrapper))
    variable = torch.autograd.variable.Variable  # holds the engine every backward pass uses
    engine = variable._execution_engine
    variable._execution_engine = _RecordedEngine(engine)
    replaced.append((variable, "_execution_engine", engine, variable._execution_engine))
    if builtins is not None:  # `torch.jit.script` compiles a wrapper's call as its builtin
        for _, _, original, wrapper in replaced:
            op = builtins._find_builtin(original)
            if op is not None:
                builtins._register_builtin(wrapper, op)
    setattr(torch, _INSTALLED, [(owner, name, original) for owner, name, original, _ in replaced])


def uninstall(torch: ModuleType) -> None:
    """Put the original callables back (for tests: a profiled process never uninstalls)."""
    for owner, name, original in getattr(torch, _INSTALLED, None) or ():
        setattr(owner, name, original)
    setattr(torch, _INSTALLED, None)


def _targets(torch: ModuleType) -> Iterator[tuple[Any, str, Callable[..., Any], str]]:
    """(owner, attribute, callable, event name) of everything to wrap."""
    for path in NAMESPACES:
        module = functools.reduce(getattr, path.split("."), torch) if path else torch
        names = dir(torch._C._VariableFunctions) if path == "_VF" else list(vars(module))
        for name in names:
            function = getattr(module, name, None)
            if type(function) is BuiltinFunctionType and _is_function_op(name):
                yield module, name, function, name
    tensor, base = torch.Tensor, torch._C.TensorBase
    for name in sorted(set(vars(base)) | set(vars(tensor))):
        method = vars(tensor).get(name, vars(base).get(name))
        if _is_method_op(name, method):
            yield tensor, name, method, name.strip("_")


def _is_function_op(name: str) -> bool:
    if name.startswith("_"):
        return name.startswith(("_foreach_", "_fused_"))
    # has_torch_function*: the check every torch.nn.functional function starts with
    return not name.startswith(("is_", "get_", "set_", "has_")) and name not in TRIVIAL_FUNCTIONS


def _is_method_op(name: str, method: Any) -> bool:
    native = type(method).__name__ in ("method_descriptor", "wrapper_descriptor")
    if OPERATORS.fullmatch(name):
        return native or type(method) is FunctionType
    if name.startswith("_") or name in TRIVIAL_METHODS:
        return False
    return native or (type(method) is FunctionType and name in PYTHON_METHODS)


def _wrap(function: Callable[..., Any], name: str) -> Callable[..., Any]:
    code = _CODES.get(name)
    if code is None:
        code = _CODES[name] = len(_NAMES)
        _NAMES.append(name)

    def call(*args: Any, **kwargs: Any) -> Any:
        recorder = _Active.recorder  # not active_recorder(): saves a call per torch call
        if recorder is None:
            return function(*args, **kwargs) if kwargs else function(*args)
        sink = _SINKS.get(get_ident())
        if sink is None or sink[0] is not recorder:
            sink = _bind(recorder)
        clock = sink[1]
        start = clock()
        try:
            return function(*args, **kwargs) if kwargs else function(*args)
        finally:
            end = clock()
            times = sink[2]
            times.append(code)
            times.append(start)
            times.append(end)
            if len(times) >= sink[3] or end >= recorder.flush_at:
                recorder.flush(end)

    # The torch function's name and docstring, for help() and tracebacks.
    return functools.update_wrapper(call, function)


def _bind(recorder: Any) -> tuple[Any, Callable[[], int], Any, int]:
    """This thread's sink for `recorder`: a new thread, or a new recorder (the first one,
    or a forked child's)."""
    buffer = recorder.thread_intervals(BACKEND, _NAMES)
    sink = (recorder, recorder.clock, buffer, 3 * recorder.flush_every)
    _SINKS[get_ident()] = sink
    return sink


class _RecordedEngine:
    """The autograd engine, with `run_backward` (the whole backward pass) recorded."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.run_backward = _wrap(engine.run_backward, "backward")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)
