"""Recurrent tensors: write an RL algorithm once, for one point of its symbolic domain.

    import rlsys.rt as rt
    prog = rt.Program(dims=("b", "t"))
    b, t = prog.dims
    B, T = prog.bounds
    with prog:
        x = rt.placeholder(shape=(), dtype="float32", domain=(b, t))
        x[b, 0] = 1.0
        x[b, t + 1] = x[b, t] * 2.0
        prog.output("total", x[b, 0:T].sum())
    exe = prog.compile(bounds={B: 4, T: 8})
    exe.run()["total"]          # 255.0 for every b

See the README's tutorial for the indexing rules, recurrences and errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rlsys.compiler import nn, optim
from rlsys.compiler import sampling as random
from rlsys.compiler.autodiff import grad
from rlsys.compiler.builder import Program, assigned_name, current_program, user_source_line
from rlsys.compiler.errors import IndexExprError, RecurrenceError
from rlsys.compiler.index import Dim, as_expr
from rlsys.compiler.index import index_max as max
from rlsys.compiler.index import index_min as min
from rlsys.compiler.rules import ShapeError
from rlsys.compiler.rules.base import checked_type
from rlsys.compiler.sampling import Categorical, DiagGaussian
from rlsys.compiler.tensor import RecurrentTensor, constant, lift

__all__ = [
    "Categorical", "DiagGaussian", "Dim", "IndexExprError", "Program", "RecurrenceError",
    "RecurrentTensor", "ShapeError", "concat", "const", "grad", "input", "lazy_where", "max",
    "maximum", "min", "minimum", "nn", "optim", "placeholder", "random", "where",
]  # fmt: skip


def _domain(program: Program, domain: Sequence[Dim | str] | None) -> tuple[Dim, ...]:
    if domain is None:
        return program.dims
    if isinstance(domain, Dim | str):  # domain=t for domain=(t,)
        domain = (domain,)
    by_name = {d.name: d for d in program.dims}
    return program.order([by_name.get(d, d) if isinstance(d, str) else d for d in domain])


def placeholder(
    shape: tuple[int, ...] = (),
    dtype: str = "float32",
    domain: Sequence[Dim] | None = None,
    name: str | None = None,
) -> RecurrentTensor:
    """A tensor defined afterwards, point set by point set: `x[b, 0] = ...`, `x[b, t+1] = ...`."""
    program = current_program()
    source = user_source_line()
    type_ = checked_type(shape, dtype, f"placeholder {name or assigned_name(source) or ''}")
    params = {"shape": type_.shape, "dtype": type_.dtype}
    return program.add_node("merge", [], _domain(program, domain), type_, params,
                            name=name or assigned_name(source), source=source)  # fmt: skip


def input(
    name: str,
    shape: tuple[int, ...] = (),
    dtype: str = "float32",
    domain: Sequence[Dim] | None = None,
) -> RecurrentTensor:
    """Data given at run time: `exe.run({name: array})`, array shaped (*domain bounds, *shape)."""
    program = current_program()
    if not isinstance(name, str):  # run() takes inputs by name
        raise RecurrenceError(f"rt.input: the name {name!r} is not a string, e.g. rt.input('r')")
    type_ = checked_type(shape, dtype, f"input {name!r}")
    params = {"shape": type_.shape, "dtype": type_.dtype, "name": name}
    return program.add_node("input", [], _domain(program, domain), type_, params, name=name)


def const(value: Any, dtype: str | None = None) -> RecurrentTensor:
    """A constant (a scalar or an array); the same at every point."""
    return constant(current_program(), value, dtype)


def where(cond: Any, a: Any, b: Any) -> RecurrentTensor:
    program = current_program()
    return program.apply("where", [lift(program, x) for x in (cond, a, b)])


def lazy_where(mask: Any, value: Any, otherwise: Any, rows: Any = None) -> RecurrentTensor:
    """where(mask, value, otherwise), where the ops that only `value` needs run only at the
    points where the mask holds, `rows` points at a time (an int or an expression of the
    bounds, such as 2 * B; default: all the points computed together). For a value that
    is costly and needed at few points: the critic on the final observation of an episode
    that was truncated (`rlsys/compiler/lazy.py`)."""
    program = current_program()
    if isinstance(rows, int | np.integer) and rows < 1:
        raise RecurrenceError(f"lazy_where: rows={rows}; give a positive number of points")
    operands = [lift(program, x) for x in (mask, value, otherwise)]
    return program.apply("lazy_where", operands, rows=None if rows is None else as_expr(rows))


def maximum(a: Any, b: Any) -> RecurrentTensor:
    program = current_program()
    return program.apply("maximum", [lift(program, a), lift(program, b)])


def minimum(a: Any, b: Any) -> RecurrentTensor:
    program = current_program()
    return program.apply("minimum", [lift(program, a), lift(program, b)])


def concat(tensors: Sequence[Any], axis: int = 0) -> RecurrentTensor:
    """Join tensors along a spatial axis."""
    program = current_program()
    if not tensors:
        raise ShapeError("concat: no tensors to join")
    return program.apply("concat", [lift(program, x) for x in tensors], axis=axis)
