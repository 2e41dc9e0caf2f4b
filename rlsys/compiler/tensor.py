"""`RecurrentTensor`: the user-facing handle on a node. Thin sugar: all logic lives elsewhere.

User code describes one point of a tensor's domain: `x[b, t + 1] = x[b, t] * 2.0` says that
for every b and every t with t + 1 < T, x at (b, t + 1) is twice x at (b, t).
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.index import Dim, IndexExpr, Symbol, as_expr
from rlsys.compiler.indexing import apply_index
from rlsys.compiler.ir import Edge
from rlsys.compiler.rules import TensorType
from rlsys.compiler.rules.base import checked_type

if TYPE_CHECKING:
    from rlsys.compiler.builder import Program

Operand = Any  # a RecurrentTensor, a Python/NumPy scalar or array, a Dim or index expression


class RecurrentTensor:
    __slots__ = ("node_id", "program")

    def __init__(self, program: Program, node_id: int) -> None:
        self.program = program
        self.node_id = node_id

    # -- what it is -------------------------------------------------------------------------
    @property
    def node(self):
        return self.program.node(self.node_id)

    @property
    def domain(self) -> tuple[Dim, ...]:
        return self.node.domain

    @property
    def shape(self) -> tuple:
        return self.node.shape

    @property
    def dtype(self) -> str:
        return self.node.dtype

    @property
    def type(self) -> TensorType:
        return TensorType(self.shape, self.dtype)

    @property
    def label(self) -> str:
        return self.node.label()

    def __repr__(self) -> str:
        dims = ", ".join(d.name for d in self.domain)
        return f"RecurrentTensor({self.label}, domain=({dims}), shape={self.shape}, {self.dtype})"

    def __bool__(self) -> bool:
        raise RecurrenceError(
            f"{self.label} has no single truth value while the program is being built; "
            "use rt.where(cond, a, b) instead of `if`, & | ~ instead of and/or/not, and "
            "rt.maximum/rt.minimum instead of the builtins max/min"
        )

    def __iter__(self):
        # Without this, Python iterates through __getitem__(0), (1), ... until an IndexError
        # that domain indexing never raises: `for v in x` built index nodes forever.
        raise RecurrenceError(
            f"{self.label} cannot be iterated over while the program is being built; index "
            "its domain (x[t], x[0:T]) or its spatial axes (.take(), .slice_axis())"
        )

    def __float__(self) -> float:
        raise RecurrenceError(
            f"{self.label} has no value while the program is being built; compute with it as "
            "a tensor and read its values from exe.run() (or prog.output/prog.sink)"
        )

    __int__ = __float__

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any):
        # NumPy on the left (`np.ones(2) + x`) otherwise applied the op once per element of
        # its array, and returned an object array of tensors: the op joins the program instead.
        op = _UFUNCS.get(ufunc.__name__) if method == "__call__" and not kwargs else None
        if op is None:
            raise RecurrenceError(
                f"numpy's {ufunc.__name__} cannot take {self.label}; use the tensor's own "
                "operators and methods (x + y, x.exp(), rt.where(...))"
            )
        return op(*(lift(self.program, x) for x in inputs))

    # -- indexing ---------------------------------------------------------------------------
    def __getitem__(self, key: Any) -> RecurrentTensor:
        node = self.node
        result = apply_index(node.domain, node.shape, key, self.program.dims, self.label)
        type_ = TensorType(result.shape, node.dtype)
        edge = Edge(self.node_id, result.index)
        return self.program.add_node("index", [edge], result.domain, type_, _type_params(type_))

    def __setitem__(self, key: Any, value: Operand) -> None:
        from rlsys.compiler.definitions import define

        define(self, key, value)

    # -- elementwise ------------------------------------------------------------------------
    def _binary(self, op: str, other: Operand, reverse: bool = False, **params: Any):
        other = lift(self.program, other)
        operands = [other, self] if reverse else [self, other]
        return self.program.apply(op, operands, **params)

    def __add__(self, o: Operand) -> RecurrentTensor:
        return self._binary("add", o)

    def __radd__(self, o: Operand) -> RecurrentTensor:
        return self._binary("add", o, True)

    def __sub__(self, o: Operand) -> RecurrentTensor:
        return self._binary("sub", o)

    def __rsub__(self, o: Operand) -> RecurrentTensor:
        return self._binary("sub", o, True)

    def __mul__(self, o: Operand) -> RecurrentTensor:
        return self._binary("mul", o)

    def __rmul__(self, o: Operand) -> RecurrentTensor:
        return self._binary("mul", o, True)

    def __truediv__(self, o: Operand) -> RecurrentTensor:
        return self._binary("div", o)

    def __rtruediv__(self, o: Operand) -> RecurrentTensor:
        return self._binary("div", o, True)

    def __pow__(self, o: Operand) -> RecurrentTensor:
        if _small_whole_number(o) and "float" in self.dtype:
            # x ** 2.0 as x * x: a general power's derivative, y * x ** (y - 1), is a pow
            # over every element (an exp and a log each) that XLA cannot simplify once the
            # exponent is a broadcast array (about 1.3 ms over 64,000 values).
            return self.program.apply("integer_pow", [self], y=int(o))
        return self._binary("pow", o)

    def __rpow__(self, o: Operand) -> RecurrentTensor:
        return self._binary("pow", o, True)

    def __floordiv__(self, o: Operand) -> RecurrentTensor:
        return self._binary("floordiv", o)

    def __mod__(self, o: Operand) -> RecurrentTensor:
        return self._binary("mod", o)

    def __matmul__(self, o: Operand) -> RecurrentTensor:
        return self._binary("matmul", o)

    def __rmatmul__(self, o: Operand) -> RecurrentTensor:
        return self._binary("matmul", o, True)

    def conv2d(self, kernel: Operand, stride: int = 1) -> RecurrentTensor:
        """These channels-last images (..., H, W, C) convolved, unpadded, by `kernel`
        (KH, KW, C, O) with `stride`: (..., (H - KH) // stride + 1, (W - KW) // stride + 1, O)."""
        return self._binary("conv2d", kernel, stride=int(stride))

    def __neg__(self) -> RecurrentTensor:
        return self.program.apply("neg", [self])

    def __abs__(self) -> RecurrentTensor:  # the builtin abs(x)
        return self.abs()

    def __lt__(self, o: Operand) -> RecurrentTensor:
        return self._binary("lt", o)

    def __le__(self, o: Operand) -> RecurrentTensor:
        return self._binary("le", o)

    def __gt__(self, o: Operand) -> RecurrentTensor:
        return self._binary("gt", o)

    def __ge__(self, o: Operand) -> RecurrentTensor:
        return self._binary("ge", o)

    def __eq__(self, o: Operand) -> RecurrentTensor:  # type: ignore[override]
        return self._binary("eq", o)

    def __ne__(self, o: Operand) -> RecurrentTensor:  # type: ignore[override]
        return self._binary("ne", o)

    def __and__(self, o: Operand) -> RecurrentTensor:
        return self._binary("logical_and", o)

    def __or__(self, o: Operand) -> RecurrentTensor:
        return self._binary("logical_or", o)

    def __invert__(self) -> RecurrentTensor:
        return self.program.apply("logical_not", [self])

    __hash__ = object.__hash__  # __eq__ builds a tensor, so identity hashing is kept explicitly

    def _unary(self, op: str, **params: Any) -> RecurrentTensor:
        return self.program.apply(op, [self], **params)

    def exp(self) -> RecurrentTensor:
        return self._unary("exp")

    def log(self) -> RecurrentTensor:
        return self._unary("log")

    def tanh(self) -> RecurrentTensor:
        return self._unary("tanh")

    def abs(self) -> RecurrentTensor:
        return self._unary("abs")

    def sqrt(self) -> RecurrentTensor:
        return self._unary("sqrt")

    def relu(self) -> RecurrentTensor:
        return self._unary("relu")

    def sigmoid(self) -> RecurrentTensor:
        return self._unary("sigmoid")

    def clip(self, low: Operand, high: Operand) -> RecurrentTensor:
        program = self.program
        floor = program.apply("maximum", [self, lift(program, low)])
        return program.apply("minimum", [floor, lift(program, high)])

    def stop_gradient(self) -> RecurrentTensor:
        return self._unary("stop_gradient")

    def astype(self, dtype: str) -> RecurrentTensor:
        return self._unary("cast", dtype=checked_type((), dtype, f"{self.label}.astype").dtype)

    def bitcast(self, dtype: str) -> RecurrentTensor:
        """The bytes of the last axis read as one `dtype` item (uint8 (..., 4) -> float32)."""
        return self._unary("bitcast", dtype=checked_type((), dtype, f"{self.label}.bitcast").dtype)

    # -- over spatial axes ------------------------------------------------------------------
    def sum(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False):
        return self._unary("sum", axis=axis, keepdims=keepdims)

    def mean(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False):
        return self._unary("mean", axis=axis, keepdims=keepdims)

    def max(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False):
        return self._unary("max", axis=axis, keepdims=keepdims)

    def min(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False):
        return self._unary("min", axis=axis, keepdims=keepdims)

    def std(self, axis: int | tuple[int, ...] | None = None, keepdims: bool = False):
        return self._unary("std", axis=axis, keepdims=keepdims)

    def argmax(self, axis: int = -1) -> RecurrentTensor:
        return self._unary("argmax", axis=axis)

    def cumsum(self, axis: int = 0) -> RecurrentTensor:
        return self._unary("cumsum", axis=axis)

    def discounted_cum_sum(self, gamma: float, done: Operand = None, axis: int = 0):
        """y[k] = x[k] + gamma * (1 - done[k]) * y[k+1] along spatial `axis` (from the end)."""
        if done is None:
            return self._unary("discounted_cum_sum", gamma=float(gamma), axis=axis)
        done = lift(self.program, done)
        return self.program.apply("discounted_cum_sum", [self, done], gamma=float(gamma),
                                  axis=axis)  # fmt: skip

    def linear_recurrence(self, a: Operand, axis: int = 0, reverse: bool = True):
        """y[k] = a[k] * y[k+1] + x[k] along spatial `axis` (from the end; `reverse=False`:
        y[k] = a[k] * y[k-1] + x[k] from the start), as a parallel scan. Returns, GAE and
        TD(lambda) are such recurrences: e.g. a = gamma * lambda * (1 - done)."""
        a = lift(self.program, a)
        if a.shape != self.shape:  # e.g. a constant discount
            a = a.broadcast_to(self.shape)
        return self.program.apply("linear_recurrence", [self, a], axis=axis, reverse=reverse)

    def reshape(self, *shape: int) -> RecurrentTensor:
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        return self._unary("reshape", shape=tuple(int(n) for n in shape))

    def slice_axis(self, start: int, stop: int, axis: int = 0) -> RecurrentTensor:
        """Spatial `x[start:stop]` along `axis` (indexing with [] addresses the domain)."""
        return self._unary("slice_axis", axis=axis, start=int(start), stop=int(stop))

    def take(self, index: Operand, axis: int = 0) -> RecurrentTensor:
        result = self._binary("take", index, axis=axis)
        _check_constant_take(self, lift(self.program, index), axis)
        return result

    def set_rows(self, start: Operand, rows: Operand) -> RecurrentTensor:
        """This tensor with its rows from `start` along the first spatial axis replaced by
        `rows` (shaped (n, *self.shape[1:])): a replay ring's slot written, in place where
        the program no longer needs the old tensor (a loop's window, passed to the next
        step)."""
        rows = lift(self.program, rows)
        return self.program.apply("set_rows", [self, lift(self.program, start), rows])

    def transpose(self, *perm: int) -> RecurrentTensor:
        perm = tuple(perm) or tuple(reversed(range(len(self.shape))))
        return self._unary("transpose", perm=perm)

    def broadcast_to(self, shape: tuple[int, ...]) -> RecurrentTensor:
        return self._unary("broadcast_to", shape=tuple(shape))

    def fold_in(self, data: Operand) -> RecurrentTensor:
        """A new key from this key and an integer (e.g. a dimension: key.fold_in(t))."""
        return self._binary("fold_in", data)

    def softmax(self, axis: int = -1) -> RecurrentTensor:
        return self._unary("softmax", axis=axis)

    def log_softmax(self, axis: int = -1) -> RecurrentTensor:
        return self._unary("log_softmax", axis=axis)


_UFUNCS = {  # NumPy's ufuncs that a NumPy operand on the left of an operator calls
    "add": operator.add, "subtract": operator.sub, "multiply": operator.mul,
    "true_divide": operator.truediv, "divide": operator.truediv, "power": operator.pow,
    "floor_divide": operator.floordiv, "remainder": operator.mod, "matmul": operator.matmul,
    "less": operator.lt, "less_equal": operator.le, "greater": operator.gt,
    "greater_equal": operator.ge, "equal": operator.eq, "not_equal": operator.ne,
    "negative": operator.neg, "exp": lambda x: x.exp(), "log": lambda x: x.log(),
    "tanh": lambda x: x.tanh(), "sqrt": lambda x: x.sqrt(), "absolute": lambda x: x.abs(),
}  # fmt: skip


def _check_constant_take(x: RecurrentTensor, index: RecurrentTensor, axis: int) -> None:
    """A constant index past the axis: JAX's gather fills with NaN (INT_MIN for integers)
    instead of failing, so it is refused where it is written. (Computed indices cannot be
    checked before they run.)"""
    size = x.shape[axis]
    if index.node.op != "const" or not isinstance(size, int):
        return
    values = index.node.param("value").array
    if values.size and (values.min() < 0 or values.max() >= size):
        raise RecurrenceError(
            f"{x.label}.take({np.array2string(values, threshold=6)}, axis={axis}): indices run "
            f"from 0 to {size - 1} along that axis of shape {x.shape}"
        )


def _small_whole_number(value: Any) -> bool:
    """A Python int or integral float from 0 to 8 (an exponent worth multiplying out)."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and float(value).is_integer() and 0 <= value <= 8)  # fmt: skip


def _type_params(type_: TensorType) -> dict[str, Any]:
    return {"shape": tuple(type_.shape), "dtype": type_.dtype}


def lift(program: Program, value: Operand) -> RecurrentTensor:
    """Turn an operand into a tensor: scalars and arrays become constants, dimensions and
    index expressions become their integer value at each point."""
    if isinstance(value, RecurrentTensor):
        if value.program is not program:
            raise RecurrenceError(f"{value.label} belongs to another program")
        return value
    if isinstance(value, Symbol | IndexExpr):
        expr = as_expr(value)
        type_ = TensorType((), "int32")
        params = {**_type_params(type_), "expr": expr}
        return program.add_node("dim_value", [], expr.dims(), type_, params)
    return constant(program, value)


def constant(program: Program, value: Any, dtype: str | None = None) -> RecurrentTensor:
    try:
        array = np.asarray(value)
    except ValueError as err:  # ragged nested lists
        raise RecurrenceError(f"cannot make a constant of {value!r}: {err}") from None
    if dtype is None:  # Python scalars take JAX's default 32-bit types
        kind = array.dtype.kind
        dtype = {"f": "float32", "i": "int32", "u": "int32", "b": "bool"}.get(kind)
        if dtype is None:
            raise RecurrenceError(f"cannot make a constant of {value!r} (dtype {array.dtype})")
    array = array.astype(dtype)
    type_ = TensorType(array.shape, str(array.dtype))
    params = {**_type_params(type_), "value": _Frozen(array)}
    return program.add_node("const", [], (), type_, params)


class _Frozen:
    """An array inside a node's params: hashable by content, so equal constants are shared."""

    __slots__ = ("array", "key")

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.array.flags.writeable = False
        self.key = (array.dtype.str, array.shape, array.tobytes())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Frozen) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return np.array2string(self.array, threshold=8)
