"""JAX: Backend intervals and automatic operations, patched into `jax` when it is imported.

`install(jax, annotate, backend)` replaces `jax.jit` (before the importer sees the module, so
`from jax import jit` gets it too) with one that returns the real jitted function inside a
thin `_Jitted` wrapper. Calling the wrapper from Python, outside any other jitted call:

* records one BACKEND interval (`backend=True`) around the call: dispatch, and on the first
  call of a signature tracing and compilation too; with JAX's asynchronous dispatch the
  computation may still run after the call returns;
* records an automatic operation (`annotate=True`), chosen by this heuristic:
  "backpropagation" if the function's tracing called `jax.grad`, `jax.value_and_grad` or
  `jax.vjp` (a training step), else "inference" (a policy, a value function, or anything
  else that is jitted: a jitted environment step is "inference" too unless it runs inside an
  annotated "simulation"). The decision is made when the call ends, so even the first call,
  whose tracing reveals the gradient, is classified right. As for torch, only the outermost
  call of a kind is an operation, and a user's own annotation of that name wins.

Waiting for results is Backend too: `jax.block_until_ready`, `jax.device_get` and the
`Array` methods that block (`block_until_ready`, `__array__` as `np.asarray` calls it,
`__float__`, `__int__`, `item`, `tolist`) record an interval each. Calls made while tracing
(jitted functions called inside a jitted function, `vmap` or `scan`) are skipped: they are
part of the outer call. JAX operations executed eagerly (`jnp.add` outside `jit`) and
compiled objects obtained via `jax.jit(f).lower(...).compile()` are not intercepted: their
time stays Python unless the caller annotates it (rlsys's own programs do).
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from rlsys.trace import Category, active_recorder

BACKEND = str(Category.BACKEND)
INFERENCE = "inference"
BACKPROPAGATION = "backpropagation"
_MARK = "__rlsys_jax__"
_BLOCKING_METHODS = ("block_until_ready", "__array__", "__float__", "__int__", "item", "tolist")


class _Calls(threading.local):
    """Per thread: the outermost `_Jitted` being called (None outside any)."""

    def __init__(self) -> None:
        self.current: _Jitted | None = None


_CALLS = _Calls()


class _Jitted:
    """A jitted function that records its outermost calls; everything else is delegated."""

    def __init__(self, jitted: Callable[..., Any], annotate: bool, backend: bool) -> None:
        functools.update_wrapper(self, jitted)
        self._jitted = jitted
        self._annotate = annotate
        self._backend = backend
        self.uses_grad = False  # set when its tracing differentiates (see `_mark_backprop`)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        calls = _CALLS
        recorder = active_recorder()
        if calls.current is not None or recorder is None:
            return self._jitted(*args, **kwargs)
        calls.current = self
        clock = recorder.clock
        start = clock()
        try:
            return self._jitted(*args, **kwargs)
        finally:
            end = clock()
            calls.current = None
            tid = recorder.thread_state().tid
            if self._backend:
                recorder.emit_raw(self.__name__, BACKEND, start, end, tid)
            if self._annotate:
                _record_operation(recorder, self.uses_grad, start, end, tid)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        # A jitted function stored on a class binds like a method, as jax's own does.
        return self if instance is None else functools.partial(self, instance)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._jitted, name)  # lower, trace, eval_shape, clear_cache, ...


def _record_operation(recorder: Any, uses_grad: bool, start: int, end: int, tid: int) -> None:
    name = BACKPROPAGATION if uses_grad else INFERENCE
    if any(span.name == name for span in recorder.thread_state().stack):
        return  # inside the user's own (or torch's automatic) operation of that name
    recorder.emit_raw(name, str(Category.OPERATION), start, end, tid)


def _mark_backprop() -> None:
    current = _CALLS.current
    if current is not None:
        current.uses_grad = True


def _wrap_jit(jit: Callable[..., Any], annotate: bool, backend: bool) -> Callable[..., Any]:
    @functools.wraps(jit)
    def patched_jit(*args: Any, **kwargs: Any) -> Any:
        if not args:  # jax.jit(static_argnums=...) used as a decorator factory
            return lambda fun: patched_jit(fun, **kwargs)
        return _Jitted(jit(*args, **kwargs), annotate, backend)

    return patched_jit


def _wrap_differentiation(transform: Callable[..., Any]) -> Callable[..., Any]:
    """`jax.grad`-like: marks the current jitted call when made or when its result is called."""

    @functools.wraps(transform)
    def patched(*args: Any, **kwargs: Any) -> Any:
        _mark_backprop()
        result = transform(*args, **kwargs)
        if not callable(result):
            return result  # jax.vjp returns values, not a function

        @functools.wraps(result)
        def differentiated(*inner: Any, **inner_kwargs: Any) -> Any:
            _mark_backprop()
            return result(*inner, **inner_kwargs)

        return differentiated

    return patched


def _wrap_wait(function: Callable[..., Any]) -> Callable[..., Any]:
    """A blocking call (waiting for results) recorded as one BACKEND interval."""
    name = getattr(function, "__name__", "wait")

    @functools.wraps(function)
    def wait(*args: Any, **kwargs: Any) -> Any:
        recorder = active_recorder()
        if recorder is None or _CALLS.current is not None:
            return function(*args, **kwargs)
        clock = recorder.clock
        start = clock()
        try:
            return function(*args, **kwargs)
        finally:
            recorder.emit_raw(name, BACKEND, start, clock(), recorder.thread_state().tid)

    return wait


def install(jax: ModuleType, *, annotate: bool, backend: bool) -> None:
    """Patch `jax` (see the module docstring); idempotent; does nothing if both are off."""
    if getattr(jax, _MARK, False) or not (annotate or backend):
        return
    setattr(jax, _MARK, True)
    jax.jit = _wrap_jit(jax.jit, annotate, backend)
    if annotate:
        for name in ("grad", "value_and_grad", "vjp"):
            setattr(jax, name, _wrap_differentiation(getattr(jax, name)))
    if backend:
        for name in ("block_until_ready", "device_get"):
            setattr(jax, name, _wrap_wait(getattr(jax, name)))
        _wrap_array_waits()


def _wrap_array_waits() -> None:
    from jax._src.array import ArrayImpl  # the concrete Array class (private, so guarded)

    for name in _BLOCKING_METHODS:
        method = ArrayImpl.__dict__.get(name)
        if inspect.isfunction(method):  # plain Python methods only (others keep C semantics)
            setattr(ArrayImpl, name, _wrap_wait(method))
