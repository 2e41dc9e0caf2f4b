"""Automatic operations: annotate an unmodified RL script while it imports its libraries.

`rlsys profile` starts its command with a `sitecustomize` (see `bootstrap/`) that calls
`install()`. From then on these calls of the profiled program become operations, with no
edit to its code (one table, `OPERATIONS`, names them all):

    simulation       gymnasium `Env.step`/`reset` and `vector.VectorEnv.step`/`reset`, in
                     every subclass (environments, wrappers, vector environments); the same
                     for the old `gym` package; Stable-Baselines3 `VecEnv.step`/`step_wait`/
                     `reset` in every subclass (DummyVecEnv, SubprocVecEnv, VecNormalize ...)
    inference        the outermost `torch.nn.Module` call made while gradients are disabled
                     (`torch.no_grad()`, `torch.inference_mode()`); calls of submodules inside
                     it are part of it, never operations of their own
    backpropagation  `torch.autograd.backward` (hence `Tensor.backward`), `torch.autograd.grad`
                     and the `step` of every `torch.optim.Optimizer` subclass

Also envpool's `step`/`reset`/`send`/`recv` (simulation), and jitted JAX calls (inference or
backpropagation, by whether their tracing differentiated: `collectors/jax_backend.py`).

Only the outermost call of a kind is an operation: a wrapper's `step` that calls the wrapped
environment's `step` (or a user's own `rlsys.operation("simulation")` around `env.step`) gives
one "simulation", not three nested ones. Other kinds nest normally (an environment that runs
a network inside `step` gives "inference" inside "simulation").

C-call intervals (the "ccalls" source, `rlsys.profiler.sources`): the same environment
wrapper also records one SIMULATOR interval per outermost environment call (even inside the
user's own "simulation" annotation); torch and JAX get BACKEND intervals from
`rlsys.profiler.collectors`. `install(sources)` chooses which of operations and intervals
the patches record (calibration switches them separately).

How patching is triggered, without importing anything: `install()` puts `_PostImportFinder`
first on `sys.meta_path`. Python asks each meta-path finder in turn for the spec of every
module being imported; ours answers only for the few names in `_PATCHES` (e.g.
"gymnasium.core", "torch"), by asking the finders after it for the real spec and giving that
spec's loader an `exec_module` that runs the module and then patches it. The module's spec,
loader type, file and resources stay what they were, the patch runs exactly once, when the
module's code has run and before its importer sees it, and a program that never imports torch
never pays for torch. A module that is already imported when `install()` runs is patched at
once.

How a class is patched: `_wrap_subclasses(Env, ("step", "reset"), "simulation")` wraps those
methods where they are defined (the base class and every subclass that exists), and adds an
`__init_subclass__` to the base class (chained to the one it had) that wraps them in each
subclass defined later, which is where environments and optimizers live. Patching only the
base class would miss every environment, since each overrides `step`.

Cost: a wrapped call nested in an operation of its kind pays a thread-local set lookup
(about 0.5 us with the wrapper's own call); `Module.__call__` with gradients enabled pays one
`torch.is_grad_enabled()` call; an outermost call pays for recording one operation (about
10 to 15 us on a busy 2-core machine, mostly `rlsys.trace`'s event and its JSON line).

Nothing here raises into the profiled program: a patch that fails prints one warning to
stderr and leaves that library unpatched.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import inspect
import os
import sys
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from rlsys.profiler import sources as _sources
from rlsys.profiler import torch_workers
from rlsys.profiler.collectors import jax_backend, torch_backend
from rlsys.trace import Category, active_recorder, operation
from rlsys.trace.annotate import _Active

SIMULATION = "simulation"
INFERENCE = "inference"
BACKPROPAGATION = "backpropagation"

OPERATIONS: dict[str, str] = {
    SIMULATION: "gymnasium (and gym) Env.step/reset and VectorEnv.step/reset in every "
    "subclass; Stable-Baselines3 VecEnv.step/step_wait/reset in every subclass; envpool "
    "step/reset/send/recv",
    INFERENCE: "the outermost torch.nn.Module call made while gradients are disabled "
    "(torch.no_grad, torch.inference_mode); jitted JAX calls whose tracing took no gradient",
    BACKPROPAGATION: "torch.autograd.backward (Tensor.backward), torch.autograd.grad and "
    "torch.optim.Optimizer.step in every subclass; jitted JAX calls whose tracing called "
    "jax.grad, jax.value_and_grad or jax.vjp",
}
"""The automatic operations: name -> the calls that become that operation."""

_MARK = "__rlsys_operation__"  # set on every function this module wrapped: never wrap twice


class _OpenOperations(threading.local):
    """Per thread: the automatic operations whose outermost call is running."""

    def __init__(self) -> None:
        self.names: set[str] = set()


_OPEN = _OpenOperations()
# A child forked inside an automatic operation is not inside it (the parent's call, recorded
# by the parent; the recorder drops the child's open annotations too): the child's own calls
# of that operation are recorded.
os.register_at_fork(after_in_child=lambda: _OPEN.names.clear())  # the forking thread's set


class _Switch:
    """Whether the installed hooks record C-call intervals right now (`record_ccalls`)."""

    ccalls = True


def record_ccalls(on: bool) -> None:
    """Switch the C-call intervals (the "ccalls" source) on or off at run time, for a
    calibration inside one process: the environment wrappers' SIMULATOR intervals and
    torch's wrapped entry points (installed or restored; torch must be imported). The
    operations stay as installed. JAX's BACKEND intervals are not switched."""
    _Switch.ccalls = on
    torch = sys.modules.get("torch")
    if torch is not None:
        (torch_backend.install if on else torch_backend.uninstall)(torch)


def _user_opened(name: str) -> bool:
    """Whether an annotation called `name` is open on this thread (e.g. the user's own)."""
    recorder = active_recorder()
    return recorder is None or any(s.name == name for s in recorder.thread_state().stack)


def _call_as(name: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call `function` as operation `name`, unless one is open already (or none records).

    The nested case, by far the most frequent, costs one thread-local set lookup.
    """
    names = _OPEN.names
    if name in names or _user_opened(name):
        return function(*args, **kwargs)
    names.add(name)
    try:
        with operation(name):
            return function(*args, **kwargs)
    finally:
        names.discard(name)


def _call_in(
    name: str, category: str, annotate: bool, function: Callable[..., Any], args: Any, kwargs: Any
) -> Any:
    """Call `function` as operation `name` (if `annotate`) and as one `category` interval.

    One wrapper records both, so an environment step pays for one wrapper call, not two.
    The interval is recorded even inside the user's own "simulation" annotation.
    """
    recorder = active_recorder()
    if recorder is None:
        return function(*args, **kwargs)
    if not _Switch.ccalls:
        return _call_as(name, function, *args, **kwargs) if annotate else function(*args, **kwargs)
    names = _OPEN.names
    names.add(name)
    try:
        with operation(name) if annotate and not _user_opened(name) else _NOT_ANNOTATED:
            clock = recorder.clock
            start = clock()
            try:
                return function(*args, **kwargs)
            finally:
                end = clock()
                # Packed, one line per flush: an environment stepped as fast as it goes
                # records tens of thousands of intervals a second.
                times = recorder.thread_intervals(category, (category,))
                times.append(0)  # the code of the interval's name, `category`
                times.append(start)
                times.append(end)
                if len(times) >= 3 * recorder.flush_every or end >= recorder.flush_at:
                    recorder.flush(end)
    finally:
        names.discard(name)


_NOT_ANNOTATED = contextlib.nullcontext()


def outermost(
    name: str,
    function: Callable[..., Any],
    category: Category | None = None,
    annotate: bool = True,
) -> Callable[..., Any]:
    """`function`, recorded as operation `name` unless an operation `name` is already open.

    With a `category`, the outermost call is also recorded as an interval of that category
    (and `annotate=False` records only that interval).
    """
    if category is None:

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            # The fast paths, inlined: nothing recording, or nested in the operation.
            if _Active.recorder is None or name in _OPEN.names:
                return function(*args, **kwargs)
            return _call_as(name, function, *args, **kwargs)

    else:
        category_name = str(category)

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if _Active.recorder is None or name in _OPEN.names:
                return function(*args, **kwargs)
            return _call_in(name, category_name, annotate, function, args, kwargs)

    setattr(wrapper, _MARK, name)
    return wrapper


def _all_subclasses(base: type) -> Iterator[type]:
    seen: set[type] = set()
    stack = [base]
    while stack:
        for cls in type.__subclasses__(stack.pop()):
            if cls not in seen:
                seen.add(cls)
                stack.append(cls)
                yield cls


def _wrap_own_methods(cls: type, names: tuple[str, ...], wrap: Callable[[Any], Any]) -> None:
    for method in names:
        function = cls.__dict__.get(method)
        if inspect.isfunction(function) and not hasattr(function, _MARK):
            setattr(cls, method, wrap(function))


def _wrap_subclasses(
    base: type, methods: tuple[str, ...], name: str, wrap: Callable[[Any], Any] | None = None
) -> None:
    """Wrap `methods` as operation `name` in `base`, its subclasses, and all later ones.

    `wrap(function)` makes the wrapper (default: `outermost(name, function)`).
    """
    marker = f"__rlsys_wraps_{name}__"
    if marker in base.__dict__:
        return
    if wrap is None:
        wrap = functools.partial(outermost, name)
    setattr(base, marker, methods)
    for cls in (base, *_all_subclasses(base)):
        _wrap_own_methods(cls, methods, wrap)
    previous = base.__dict__.get("__init_subclass__")

    def __init_subclass__(cls: type, **kwargs: Any) -> None:
        if previous is not None:
            previous.__get__(None, cls)(**kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        _wrap_own_methods(cls, methods, wrap)

    base.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]


# --- the patches, one per watched module ---------------------------------------------------


def _wrap_simulation(base: type, methods: tuple[str, ...], sources: frozenset[str]) -> None:
    """Environment calls: operation "simulation" and, with ccalls, a SIMULATOR interval."""
    annotate = _sources.ANNOTATIONS in sources
    category = Category.SIMULATOR if _sources.CCALLS in sources else None
    if not annotate and category is None:
        return

    def wrap(function: Callable[..., Any]) -> Callable[..., Any]:
        return outermost(SIMULATION, function, category, annotate)

    _wrap_subclasses(base, methods, SIMULATION, wrap)


def _patch_gymnasium_env(module: ModuleType, sources: frozenset[str]) -> None:
    _wrap_simulation(module.Env, ("step", "reset"), sources)


def _patch_gymnasium_vector_env(module: ModuleType, sources: frozenset[str]) -> None:
    _wrap_simulation(module.VectorEnv, ("step", "reset"), sources)


def _patch_sb3_vec_env(module: ModuleType, sources: frozenset[str]) -> None:
    _wrap_simulation(module.VecEnv, ("step", "step_wait", "reset"), sources)


def _patch_envpool(module: ModuleType, sources: frozenset[str]) -> None:
    # Every envpool class (gym, gymnasium, dm_env flavours) mixes in EnvPoolMixin.
    _wrap_simulation(module.EnvPoolMixin, ("step", "reset", "send", "recv"), sources)


def _patch_envpool_gymnasium(module: ModuleType, sources: frozenset[str]) -> None:
    _wrap_simulation(module.GymnasiumEnvPoolMixin, ("reset",), sources)


def _patch_torch(torch: ModuleType, sources: frozenset[str]) -> None:
    torch_workers.install(torch)  # whatever the sources: a terminated worker keeps its events
    if _sources.CCALLS in sources and active_recorder() is not None:
        # Wrapped entry points cost every torch call a Python call, even when they record
        # nothing: only while recording, never in a program that merely has the hooks.
        torch_backend.install(torch)
    if _sources.ANNOTATIONS not in sources:
        return
    module_class = torch.nn.Module
    if not hasattr(module_class.__call__, _MARK):
        module_class.__call__ = _inference_call(torch, module_class.__call__)
    autograd = torch.autograd
    for function in ("backward", "grad"):
        current = getattr(autograd, function)
        if not hasattr(current, _MARK):
            setattr(autograd, function, outermost(BACKPROPAGATION, current))
    _wrap_subclasses(torch.optim.Optimizer, ("step",), BACKPROPAGATION)


def _patch_jax(jax: ModuleType, sources: frozenset[str]) -> None:
    jax_backend.install(
        jax, annotate=_sources.ANNOTATIONS in sources, backend=_sources.CCALLS in sources
    )


def _inference_call(torch: ModuleType, call: Callable[..., Any]) -> Callable[..., Any]:
    """`Module.__call__`, recorded as inference when gradients are off and it is outermost."""
    is_grad_enabled = torch.is_grad_enabled
    compiler = getattr(torch, "compiler", None)
    is_compiling = getattr(compiler, "is_compiling", lambda: False)

    @functools.wraps(call)
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Nothing recording: one call, so that a program with the hooks but no recorder pays
        # almost nothing. Inside torch.compile's tracing, annotating would only cost graph
        # breaks.
        if _Active.recorder is None or is_grad_enabled() or INFERENCE in _OPEN.names:
            return call(self, *args, **kwargs)
        if is_compiling():
            return call(self, *args, **kwargs)
        return _call_as(INFERENCE, call, self, *args, **kwargs)

    setattr(__call__, _MARK, INFERENCE)
    return __call__


_PATCHES: dict[str, Callable[[ModuleType, frozenset[str]], None]] = {
    "gymnasium.core": _patch_gymnasium_env,
    "gymnasium.vector.vector_env": _patch_gymnasium_vector_env,
    "gym.core": _patch_gymnasium_env,
    "gym.vector.vector_env": _patch_gymnasium_vector_env,
    "stable_baselines3.common.vec_env.base_vec_env": _patch_sb3_vec_env,
    "envpool.python.envpool": _patch_envpool,
    "envpool.python.gymnasium_envpool": _patch_envpool_gymnasium,
    "torch": _patch_torch,
    "jax": _patch_jax,
}
"""Watched module -> its patch, run right after the module's code (see the docstring)."""


_AFTER_IMPORT: dict[str, list[Callable[[ModuleType], None]]] = {}
"""Other collectors' callbacks per watched module (GPU tracing starts with torch and jax)."""


def after_import(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Run `callback(module)` once module `name` has been imported, right after its code
    (after the automatic operations' patch), or now if it already is. Uses the watcher
    `install()` puts on sys.meta_path, which installs it too."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    if name in sys.modules:
        _call(name, callback, sys.modules[name])
    else:
        _AFTER_IMPORT.setdefault(name, []).append(callback)


def _apply(name: str, module: ModuleType) -> None:
    if name in _PATCHES:
        _call(name, functools.partial(_PATCHES[name], sources=_FINDER.sources), module)
    for callback in _AFTER_IMPORT.pop(name, []):
        _call(name, callback, module)


def _call(name: str, callback: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        callback(module)
    except Exception as err:  # never break the profiled program over its profiling
        print(f"rlsys profile: nothing recorded for {name} ({type(err).__name__}: {err})",
              file=sys.stderr)  # fmt: skip


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself; makes the loaders of watched modules patch them once executed."""

    def __init__(self) -> None:
        self._local = threading.local()  # names this thread is resolving (no recursion)
        self.sources: frozenset[str] = frozenset(_sources.SOURCES)  # what patches record

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in _PATCHES and fullname not in _AFTER_IMPORT:
            return None
        busy: set[str] = self._local.__dict__.setdefault("busy", set())
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            spec = self._real_spec(fullname, path, target)
        finally:
            busy.discard(fullname)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            _patch_after_exec(spec, fullname)
        return spec

    def _real_spec(self, fullname: str, path: Any, target: Any) -> Any:
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None


def _patch_after_exec(spec: Any, name: str) -> None:
    loader = spec.loader
    original = loader.exec_module

    def exec_module(module: ModuleType) -> None:
        original(module)
        with contextlib.suppress(AttributeError):
            del loader.exec_module  # back to the class's method (e.g. for a reload)
        _apply(name, module)

    try:
        loader.exec_module = exec_module  # an instance attribute: type and resources unchanged
    except AttributeError:  # a loader with __slots__: wrap it instead
        spec.loader = _PatchingLoader(loader, exec_module)


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, exec_module: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self.exec_module = exec_module  # type: ignore[method-assign]

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


_FINDER = _PostImportFinder()


def install(sources: frozenset[str] | None = None) -> None:
    """Add the automatic operations: watch future imports, patch what is already imported.

    `sources` (default: all, `rlsys.profiler.sources`) says what the patches record:
    operations ("annotations") and/or C-call intervals ("ccalls"); it applies to modules
    not patched yet. Idempotent; imports nothing. Events are recorded only while a recorder
    is active (`rlsys.trace.start_recording`, or RLSYS_TRACE_DIR as `rlsys profile` sets it).
    """
    if sources is not None:
        _FINDER.sources = frozenset(sources)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    for name in _PATCHES:
        module = sys.modules.get(name)
        if module is not None:
            _apply(name, module)
