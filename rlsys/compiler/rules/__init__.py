"""Per-op rules, one entry per op: how its type is inferred and what it computes at a point.

Every op's rules sit together in one `OpRule`: `infer` gives the spatial shape and dtype of
the result from those of the inputs (and raises `ShapeError` with a message naming the op
when they do not fit); `point` computes the value at one point of the domain from the input
values at that point (JAX NumPy on spatial arrays). The reference interpreter applies `point`
point by point; the JAX lowering vectorizes the same function over the domain with `vmap`, so
an op's meaning is written once. Structural ops (const, input, index, merge, dim_value) have
no `point`: the interpreter and the lowering implement them directly.
"""

from __future__ import annotations

from rlsys.compiler.rules import (  # noqa: F401  (importing registers the rules)
    conv,
    elementwise,
    random_ops,
    reduce,
    shape_ops,
    structural,
)
from rlsys.compiler.rules.base import RULES, OpRule, ShapeError, TensorType

__all__ = ["RULES", "OpRule", "ShapeError", "TensorType"]
