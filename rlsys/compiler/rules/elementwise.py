"""Elementwise ops: unary math, binary arithmetic and comparisons, `where`, `cast`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from rlsys.compiler.rules.base import ShapeError, TensorType, broadcast_shapes, promote, register

UNARY = {
    "neg": jnp.negative,
    "exp": jnp.exp,
    "log": jnp.log,
    "tanh": jnp.tanh,
    "abs": jnp.abs,
    "sqrt": jnp.sqrt,
    "relu": jax.nn.relu,
    "sigmoid": jax.nn.sigmoid,
    "stop_gradient": jax.lax.stop_gradient,
    "logical_not": jnp.logical_not,
}
ARITHMETIC = {
    "add": jnp.add,
    "sub": jnp.subtract,
    "mul": jnp.multiply,
    "div": jnp.true_divide,
    "pow": jnp.power,
    "maximum": jnp.maximum,
    "minimum": jnp.minimum,
    "floordiv": jnp.floor_divide,
    "mod": jnp.mod,
}
COMPARISON = {
    "eq": jnp.equal,
    "ne": jnp.not_equal,
    "lt": jnp.less,
    "le": jnp.less_equal,
    "gt": jnp.greater,
    "ge": jnp.greater_equal,
    "logical_and": jnp.logical_and,
    "logical_or": jnp.logical_or,
}
FLOAT_ONLY = {"exp", "log", "tanh", "sqrt", "sigmoid", "div"}


def _same(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    return types[0]


def _float_result(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    dtype = promote([t.dtype for t in types])
    if not jnp.issubdtype(dtype, jnp.floating):
        dtype = "float32"
    return TensorType(broadcast_shapes("op", [t.shape for t in types]), dtype)


def _arith(name: str):
    def infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
        dtype = promote([t.dtype for t in types])
        if name in FLOAT_ONLY and not jnp.issubdtype(dtype, jnp.floating):
            dtype = "float32"
        return TensorType(broadcast_shapes(name, [t.shape for t in types]), dtype)

    return infer


def _compare(name: str):
    def infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
        return TensorType(broadcast_shapes(name, [t.shape for t in types]), "bool")

    return infer


def _where(name: str):
    def infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
        if types[0].dtype != "bool":  # JAX would take any nonzero number as true, silently
            raise ShapeError(f"{name}: the condition is {types[0].dtype}, not bool; compare it "
                             "first, e.g. x > 0.0")  # fmt: skip
        shape = broadcast_shapes(name, [t.shape for t in types])
        return TensorType(shape, promote([types[1].dtype, types[2].dtype]))

    return infer


def _cast_infer(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    return TensorType(types[0].shape, str(jnp.dtype(params["dtype"])))


for _name, _fn in UNARY.items():
    register(_name, _float_result if _name in FLOAT_ONLY else _same, _fn)
for _name, _fn in ARITHMETIC.items():
    register(_name, _arith(_name), _fn)
for _name, _fn in COMPARISON.items():
    register(_name, _compare(_name), _fn)
register("where", _where("where"), jnp.where)
# Its JAX lowering is its own (lazy.py); `rows` only says how it computes.
register("lazy_where", _where("lazy_where"), lambda mask, a, b, rows=None: jnp.where(mask, a, b))
register("cast", _cast_infer, lambda x, dtype: x.astype(dtype))
register("integer_pow", _same, lambda x, y: jax.lax.integer_pow(x, y))  # x ** 2.0 and the like
