"""Optimizers as recurrences over the iteration dimension.

`opt.minimize(loss, params)` adds the update to placeholders that already have their initial
value (`params[0] = ...`, as `rt.nn` modules do): for Adam, with g = grad(loss, params),

    m_new[i] = b1 * m[i] + (1 - b1) * g[i]          m[0] = 0,  m[i + 1] = m_new[i]
    v_new[i] = b2 * v[i] + (1 - b2) * g[i]**2       v[0] = 0,  v[i + 1] = v_new[i]
    params[i + 1] = params[i] - lr[i] * m_hat / (sqrt(v_hat) + eps)
    with m_hat = m_new / (1 - b1**(i + 1)) and v_hat = v_new / (1 - b2**(i + 1))

which is `optax.adam` step for step. `max_grad_norm` clips all gradients together by their
global norm first (`optax.clip_by_global_norm`); `lr` may be a number or a function of the
iteration dimension (e.g. linear annealing: `lambda i: 2.5e-4 * (1 - i / I)`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rlsys.compiler.autodiff import grad
from rlsys.compiler.builder import current_program
from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.index import Dim
from rlsys.compiler.tensor import RecurrentTensor, lift

LearningRate = float | Callable[[Dim], object]


def _as_list(params: RecurrentTensor | Sequence[RecurrentTensor]) -> list[RecurrentTensor]:
    return [params] if isinstance(params, RecurrentTensor) else list(params)


def _iteration_dim(params: list[RecurrentTensor], dim: Dim | None) -> Dim:
    for p in params:
        if p.node.op != "merge":
            raise RecurrenceError(
                f"minimize: {p.label} is not a placeholder; parameters are placeholders with "
                "an initial value, e.g. from rt.nn"
            )
    dim = dim or params[0].domain[0]
    for p in params:
        if p.domain != (dim,):
            raise RecurrenceError(
                f"minimize: {p.label} has domain ({', '.join(d.name for d in p.domain)}); "
                f"parameters vary along the iteration dimension only: ({dim.name},)"
            )
    return dim


def clip_by_global_norm(grads: list[RecurrentTensor], max_norm: float) -> list[RecurrentTensor]:
    """Scale all gradients together so that their global norm is at most `max_norm` (inf:
    leave them as they are; the scale would be inf / inf)."""
    if max_norm == float("inf"):
        return grads
    squares = [(g * g).sum() for g in grads]
    norm = sum(squares[1:], start=squares[0]).sqrt()
    program = grads[0].program
    scale = max_norm / program.apply("maximum", [norm, lift(program, max_norm)])
    return [g * scale for g in grads]


def clipped_grads(loss, params: list[RecurrentTensor], max_norm: float | None):
    grads = [grad(loss, p) for p in params]
    return grads if max_norm is None else clip_by_global_norm(grads, max_norm)


def _learning_rate(lr: LearningRate, dim: Dim):
    program = current_program()
    return lift(program, lr(dim) if callable(lr) else lr)


def _check_settings(opt: Any, fields: Sequence[str]) -> None:
    """Refuse settings that made every parameter NaN after the first step, silently."""
    for name in fields:
        value = getattr(opt, name)
        if name == "lr" and callable(value):
            continue
        number = isinstance(value, numbers.Real) and not isinstance(value, bool)  # np.float32
        if not number or not math.isfinite(value):
            raise RecurrenceError(f"{type(opt).__name__}: {name}={value!r} must be a finite number")
    norm = opt.max_grad_norm
    if norm is not None and not norm > 0:  # inf: no clipping; NaN fails this too
        raise RecurrenceError(f"{type(opt).__name__}: max_grad_norm={norm!r} must be > 0 or None")


@dataclass
class SGD:
    lr: LearningRate = 1e-2
    max_grad_norm: float | None = None

    def __post_init__(self) -> None:
        _check_settings(self, ("lr",))

    def minimize(self, loss, params, dim: Dim | None = None) -> None:
        params = _as_list(params)
        i = _iteration_dim(params, dim)
        lr = _learning_rate(self.lr, i)
        for p, g in zip(params, clipped_grads(loss, params, self.max_grad_norm), strict=True):
            p[i + 1] = p[i] - lr * g[i]


@dataclass
class Adam:
    lr: LearningRate = 3e-4
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    max_grad_norm: float | None = None

    def __post_init__(self) -> None:
        _check_settings(self, ("lr", "b1", "b2", "eps"))

    def minimize(self, loss, params, dim: Dim | None = None) -> None:
        from rlsys.rt import placeholder

        params = _as_list(params)
        i = _iteration_dim(params, dim)
        lr = _learning_rate(self.lr, i)
        step = lift(current_program(), i + 1).astype("float32")
        for p, g in zip(params, clipped_grads(loss, params, self.max_grad_norm), strict=True):
            m = placeholder(p.shape, p.dtype, domain=(i,), name=f"adam_m({p.label})")
            v = placeholder(p.shape, p.dtype, domain=(i,), name=f"adam_v({p.label})")
            m[0] = 0.0
            v[0] = 0.0
            p_new, m[i + 1], v[i + 1] = self.update(p[i], m[i], v[i], g[i], step, lr)
            p[i + 1] = p_new

    def update(self, param, m, v, g, step, lr):
        """One Adam step at one point: (param, m, v) after gradient g at step count `step`
        (1 for the first update). For recurrences other than minimize()'s, e.g. PPO's."""
        program = param.program
        m_new = self.b1 * m + (1.0 - self.b1) * g
        v_new = self.b2 * v + (1.0 - self.b2) * g * g
        m_hat = m_new / (1.0 - lift(program, self.b1) ** step)
        v_hat = v_new / (1.0 - lift(program, self.b2) ** step)
        return param - lr * m_hat / (v_hat.sqrt() + self.eps), m_new, v_new
