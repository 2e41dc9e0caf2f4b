"""What a compiled program looks like from outside: the only compiler types the runtime uses.

`CompiledProgram.run(inputs)` takes the program inputs by name (arrays shaped as their
`InputSpec` says) and returns the outputs by name as NumPy arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from rlsys.compiler.errors import RecurrenceError


@dataclass(frozen=True)
class InputSpec:
    """One program input: (*bounds of its domain, *spatial shape), and its dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str


class CompiledProgram(Protocol):
    input_specs: Mapping[str, InputSpec]

    def run(self, inputs: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]: ...


def check_inputs(specs: Mapping[str, InputSpec], inputs: Mapping[str, Any]) -> dict:
    """The inputs as arrays of the declared shapes and dtypes, or a clear error."""
    if not isinstance(inputs, Mapping):
        raise RecurrenceError(
            f"run() takes its inputs as a mapping from name to array, got "
            f"{type(inputs).__name__} (expected: {', '.join(sorted(specs)) or 'no inputs'})"
        )
    unknown = sorted(set(inputs) - set(specs))
    missing = sorted(set(specs) - set(inputs))
    if unknown or missing:
        raise RecurrenceError(
            f"run() inputs do not match the program: missing {missing or 'none'}, unknown "
            f"{unknown or 'none'} (expected: {', '.join(sorted(specs)) or 'no inputs'})"
        )
    arrays = {}
    for name, spec in specs.items():
        array = np.asarray(inputs[name])
        if array.shape != spec.shape:
            raise RecurrenceError(
                f"input {name!r} has shape {array.shape}; the program expects {spec.shape} "
                "(the bounds of its domain, then its spatial shape)"
            )
        _check_cast(name, array, spec.dtype)
        arrays[name] = array.astype(spec.dtype, copy=False)
    return arrays


def _check_cast(name: str, array: np.ndarray, dtype: str) -> None:
    """Refuse what `astype` would change silently: objects became NaN, floats were truncated
    to integers (inf to INT_MIN), and integers out of range wrapped around (2**40 to 0)."""
    kind, target = array.dtype.kind, np.dtype(dtype)
    if kind not in "biuf":
        raise RecurrenceError(f"input {name!r} holds {array.dtype} values; give numbers")
    if kind == "f" and target.kind in "biu":
        raise RecurrenceError(
            f"input {name!r} is {array.dtype} but the program declares {dtype}; convert it "
            f"yourself (np.round(x).astype('{dtype}')) if truncation is meant"
        )
    if kind in "iu" and target.kind in "iu" and array.size:
        info = np.iinfo(target)
        if array.min() < info.min or array.max() > info.max:
            raise RecurrenceError(
                f"input {name!r} has values from {array.min()} to {array.max()}, outside "
                f"{dtype}'s {info.min}..{info.max}"
            )
