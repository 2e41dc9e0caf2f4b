"""Symbolic dimensions, their bounds, and index expressions.

A program declares dimensions (`i`, `b`, `t`), each with an upper bound symbol (`I`, `B`,
`T`): the dimension ranges over `0 <= t < T`. Index expressions are built from dimensions,
bounds and integers with `+`, `-`, integer `*`, and `index_min` / `index_max`:

    t, t + 1, T - 1, 0, index_min(t + n, T - 1), 2 * t

They are kept in a canonical form (a sum of symbol terms plus a constant; min/max with
constant differences folded), so equal expressions compare and hash equal and common
subexpressions are found by the compiler. A `Slice` (`0:T`, `t:T`, `0:t+1`,
`t:index_min(t+n, T)`) is written with Python slice syntax and converted by `as_index`.

Evaluation takes a mapping from symbols to integers or NumPy integer arrays (arrays let the
compiler evaluate an index at every point of a domain at once).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlsys.compiler.errors import IndexExprError

Value = Any  # an int or an integer NumPy array
Env = Mapping["Symbol", Value]


def _is_index_operand(value: Any) -> bool:
    is_int = isinstance(value, int | np.integer) and not isinstance(value, bool)
    return is_int or isinstance(value, Symbol | IndexExpr)


def _as_value(expr: Any):
    """An index expression used as a number (`i / I`, `0.99 ** t`): a tensor of its values."""
    from rlsys.compiler.builder import current_program  # the tensor layer builds on this one
    from rlsys.compiler.tensor import lift

    return lift(current_program(), expr)


class _ExprOps:
    """Arithmetic shared by symbols and expressions. With integers and other index
    expressions the result is a canonical `IndexExpr`; with anything else (a float, a
    tensor) the expression stands for its value at each point and the result is a tensor."""

    def __add__(self, other: Any):
        if not _is_index_operand(other):
            return _as_value(self) + other
        return _add(as_expr(self), as_expr(other))

    def __radd__(self, other: Any):
        if not _is_index_operand(other):
            return other + _as_value(self)
        return _add(as_expr(other), as_expr(self))

    def __sub__(self, other: Any):
        if not _is_index_operand(other):
            return _as_value(self) - other
        return _add(as_expr(self), _scale(as_expr(other), -1))

    def __rsub__(self, other: Any):
        if not _is_index_operand(other):
            return other - _as_value(self)
        return _add(as_expr(other), _scale(as_expr(self), -1))

    def __neg__(self) -> IndexExpr:
        return _scale(as_expr(self), -1)

    def __mul__(self, other: Any):
        if isinstance(other, Symbol | IndexExpr):
            raise IndexExprError(f"cannot multiply index expressions {self} and {other}")
        if not _is_index_operand(other):
            return _as_value(self) * other
        return _scale(as_expr(self), int(other))

    def __rmul__(self, other: Any):
        return self.__mul__(other) if _is_index_operand(other) else other * _as_value(self)

    def __truediv__(self, other: Any):
        return _as_value(self) / other

    def __floordiv__(self, other: Any):
        return _as_value(self) // other

    def __mod__(self, other: Any):
        return _as_value(self) % other

    def __rtruediv__(self, other: Any):
        return other / _as_value(self)

    def __rpow__(self, other: Any):
        return other ** _as_value(self)


_symbol_ids = itertools.count()


class Symbol(_ExprOps):
    """A named integer unknown: a dimension or a dimension's bound. Compared by identity."""

    __slots__ = ("_order", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._order = next(_symbol_ids)  # a stable sort key: creation order

    def __repr__(self) -> str:
        return self.name


class Bound(Symbol):
    """The upper bound of a dimension (`T` for `t`); known only when the program compiles."""

    __slots__ = ("dim",)


class Dim(Symbol):
    """A symbolic dimension, ranging over `0 <= d < d.bound`."""

    __slots__ = ("bound",)

    def __init__(self, name: str, bound_name: str | None = None) -> None:
        super().__init__(name)
        self.bound = Bound(bound_name or name.upper())
        self.bound.dim = self


class IndexExpr(_ExprOps):
    """Base of canonical index expressions."""

    __slots__ = ()

    def evaluate(self, env: Env) -> Value:
        raise NotImplementedError

    def symbols(self) -> frozenset[Symbol]:
        raise NotImplementedError

    def dims(self) -> frozenset[Dim]:
        return frozenset(s for s in self.symbols() if isinstance(s, Dim))

    def substitute(self, env: Mapping[Symbol, ExprLike]) -> IndexExpr:
        raise NotImplementedError

    def constant_value(self) -> int | None:
        """The integer this expression always equals, or None if it depends on a symbol."""
        return None


@dataclass(frozen=True, eq=True)
class Affine(IndexExpr):
    """`sum(coeff * symbol) + const`, terms sorted and without zero coefficients."""

    terms: tuple[tuple[Symbol, int], ...]
    const: int

    def evaluate(self, env: Env) -> Value:
        total: Value = self.const
        for symbol, coeff in self.terms:
            try:
                total = total + coeff * env[symbol]
            except KeyError:
                raise IndexExprError(f"no value for {symbol.name} in index {self}") from None
        return total

    def symbols(self) -> frozenset[Symbol]:
        return frozenset(s for s, _ in self.terms)

    def substitute(self, env: Mapping[Symbol, ExprLike]) -> IndexExpr:
        result: IndexExpr = Affine((), self.const)
        for symbol, coeff in self.terms:
            result = _add(result, _scale(as_expr(env.get(symbol, symbol)), coeff))
        return result

    def constant_value(self) -> int | None:
        return self.const if not self.terms else None

    def single_dim(self) -> tuple[Dim, int] | None:
        """(d, k) when this is `d + k` with k constant, else None."""
        if len(self.terms) == 1 and self.terms[0][1] == 1 and isinstance(self.terms[0][0], Dim):
            return self.terms[0][0], self.const
        return None

    def __str__(self) -> str:
        parts = []
        for symbol, coeff in self.terms:
            sign = "-" if coeff < 0 else "+"
            mag = abs(coeff)
            parts.append((sign, symbol.name if mag == 1 else f"{mag}*{symbol.name}"))
        if self.const or not parts:
            parts.append(("-" if self.const < 0 else "+", str(abs(self.const))))
        first_sign, first = parts[0]
        text = ("-" if first_sign == "-" else "") + first
        return text + "".join(f"{sign}{part}" for sign, part in parts[1:])


@dataclass(frozen=True, eq=True)
class MinMax(IndexExpr):
    """`min(args)` or `max(args)` of two or more canonical expressions."""

    kind: str  # "min" | "max"
    args: tuple[IndexExpr, ...]

    def evaluate(self, env: Env) -> Value:
        values = [a.evaluate(env) for a in self.args]
        combine = _elementwise_min_max(self.kind, values)
        result = values[0]
        for value in values[1:]:
            result = combine(result, value)
        return int(result) if np.ndim(result) == 0 else result

    def symbols(self) -> frozenset[Symbol]:
        return frozenset().union(*(a.symbols() for a in self.args))

    def substitute(self, env: Mapping[Symbol, ExprLike]) -> IndexExpr:
        return _min_max(self.kind, [a.substitute(env) for a in self.args])

    def __str__(self) -> str:
        return f"{self.kind}({', '.join(str(a) for a in self.args)})"


@dataclass(frozen=True, eq=True)
class Slice:
    """`start:stop` along one dimension (step 1); a new leading spatial axis when indexed."""

    start: IndexExpr
    stop: IndexExpr

    def symbols(self) -> frozenset[Symbol]:
        return self.start.symbols() | self.stop.symbols()

    def dims(self) -> frozenset[Dim]:
        return self.start.dims() | self.stop.dims()

    def length(self) -> IndexExpr:
        return self.stop - self.start

    def substitute(self, env: Mapping[Symbol, ExprLike]) -> Slice:
        return Slice(self.start.substitute(env), self.stop.substitute(env))

    def __str__(self) -> str:
        return f"{self.start}:{self.stop}"


ExprLike = int | Symbol | IndexExpr
Index = IndexExpr | Slice


def as_expr(value: ExprLike) -> IndexExpr:
    if isinstance(value, IndexExpr):
        return value
    if isinstance(value, Symbol):
        return Affine(((value, 1),), 0)
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return Affine((), int(value))
    raise IndexExprError(
        f"{value!r} is not an index expression; use a dimension, a bound, an integer, "
        "or +, -, index_min, index_max of those (a tensor's values select along its spatial "
        "axes with .take())"
    )


def as_index(value: ExprLike | slice) -> Index:
    """Convert what a user wrote inside `x[...]` to an `IndexExpr` or a `Slice`."""
    if isinstance(value, slice):
        if value.step not in (None, 1):
            raise IndexExprError(f"slice {value} has a step; only step 1 is supported")
        if value.start is None or value.stop is None:
            raise IndexExprError(
                "write both ends of a slice over a dimension, e.g. x[0:T] or x[t:T] "
                "(an open end would hide which bound is meant)"
            )
        return Slice(as_expr(value.start), as_expr(value.stop))
    return as_expr(value)


def index_min(*args: ExprLike) -> IndexExpr:
    return _min_max("min", [as_expr(a) for a in args])


def index_max(*args: ExprLike) -> IndexExpr:
    return _min_max("max", [as_expr(a) for a in args])


def _add(a: IndexExpr, b: IndexExpr) -> IndexExpr:
    if isinstance(a, Affine) and isinstance(b, Affine):
        coeffs: dict[Symbol, int] = dict(a.terms)
        for symbol, coeff in b.terms:
            coeffs[symbol] = coeffs.get(symbol, 0) + coeff
        terms = tuple(sorted(((s, c) for s, c in coeffs.items() if c != 0), key=_term_order))
        return Affine(terms, a.const + b.const)
    # min(x, y) + z == min(x + z, y + z): keep min/max outermost so folding still sees it.
    if isinstance(a, Affine):
        a, b = b, a
    if isinstance(a, MinMax) and isinstance(b, Affine):
        return _min_max(a.kind, [_add(x, b) for x in a.args])
    if isinstance(a, MinMax) and isinstance(b, MinMax) and a.kind == b.kind:
        return _min_max(a.kind, [_add(x, y) for x in a.args for y in b.args])
    raise IndexExprError(
        f"cannot add {a} and {b}: a min and a max do not combine into one index; "
        "rewrite the index with only min or only max"
    )


def _scale(a: IndexExpr, factor: int) -> IndexExpr:
    if isinstance(a, Affine):
        terms = tuple((s, c * factor) for s, c in a.terms if c * factor != 0)
        return Affine(terms, a.const * factor)
    if factor == 1:
        return a
    if factor == -1:
        flipped = "max" if a.kind == "min" else "min"
        return _min_max(flipped, [_scale(x, -1) for x in a.args])
    raise IndexExprError(f"cannot multiply {a} by {factor}: only by 1 or -1")


def _min_max(kind: str, args: list[IndexExpr]) -> IndexExpr:
    flat: list[IndexExpr] = []
    for arg in args:  # min(min(a, b), c) == min(a, b, c)
        flat.extend(arg.args if isinstance(arg, MinMax) and arg.kind == kind else [arg])
    pick = min if kind == "min" else max
    kept: list[IndexExpr] = []
    for arg in flat:
        for k, other in enumerate(kept):
            difference = _constant_difference(arg, other)
            if difference is not None:  # same symbols: keep only the smaller (or larger)
                kept[k] = arg if pick(difference, 0) == difference and difference != 0 else other
                break
        else:
            kept.append(arg)
    if len(kept) == 1:
        return kept[0]
    return MinMax(kind, tuple(sorted(kept, key=str)))


def _elementwise_min_max(kind: str, values: list[Value]):
    """NumPy's minimum/maximum, or JAX's while a lowering evaluates indices on traced values."""
    if all(isinstance(v, int | np.integer | np.ndarray) for v in values):
        return np.minimum if kind == "min" else np.maximum
    import jax.numpy as jnp  # only reached from the JAX lowering

    return jnp.minimum if kind == "min" else jnp.maximum


def _term_order(term: tuple[Symbol, int]) -> int:
    return term[0]._order


def _constant_difference(a: IndexExpr, b: IndexExpr) -> int | None:
    if isinstance(a, Affine) and isinstance(b, Affine) and a.terms == b.terms:
        return a.const - b.const
    return None
