"""Structural ops: the interpreter and the lowering implement them, the rules type them.

- const: a value given when the program is built (params: value).
- input: an array given at run time, one entry per point of the domain (params: name).
- dim_value: the integer value of an index expression at each point (params: expr).
- index: reads its single input at the point(s) its edge index names (slices add axes).
- merge: a placeholder; takes the value of the first branch whose region holds the point.
- grad: the derivative of its first input (a scalar loss) by its second (see autodiff.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlsys.compiler.rules.base import TensorType, register


def _given(types: Sequence[TensorType], params: Mapping[str, Any]) -> TensorType:
    return TensorType(tuple(params["shape"]), params["dtype"])


for _name in ("const", "input", "dim_value", "index", "merge", "grad"):
    register(_name, _given, None)
