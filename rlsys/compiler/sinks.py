"""Sinks: user functions that see the values of a tensor, point by point, as a run goes.

    prog.sink(loss, lambda point, value: print(point["i"], value))

`fn(point, value)` is called once per point of the tensor's domain, in order, where `point`
maps each dimension name to its index and `value` is the tensor's value there (a NumPy
array of its spatial shape). A sink of a tensor that the iteration loop computes fires
after each iteration, for that iteration's points, so logging sees training as it happens;
other sinks fire once, when the run ends. A sink never changes what the program computes.

A sink is carried as a hidden program output (named `SINK_PREFIX` + a number): the values
leave the compiled code the way outputs do, in bulk, after each jitted call, instead of
through a callback inside it (which would cost a host round trip per point).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

SINK_PREFIX = "__sink__"
SinkFn = Callable[[dict[str, int], np.ndarray], Any]


@dataclass(frozen=True)
class Sink:
    output: str  # the hidden output carrying its values
    fn: SinkFn
    dims: tuple[str, ...]  # the tensor's domain, in order


def is_sink_output(name: str) -> bool:
    return name.startswith(SINK_PREFIX)


def fire(sink: Sink, values: np.ndarray, fixed: Mapping[str, int] | None = None) -> None:
    """Call the sink for every point of `values`, whose leading axes are the sink's dims
    that are not `fixed` (e.g. the iteration, when firing one iteration's points)."""
    fixed = dict(fixed or {})
    free = [d for d in sink.dims if d not in fixed]
    values = np.asarray(values)
    for index in np.ndindex(*values.shape[: len(free)]):
        point = {**fixed, **dict(zip(free, index, strict=True))}
        sink.fn({d: int(point[d]) for d in sink.dims}, values[index])


def fire_all(sinks: Iterable[Sink], outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Fire `sinks` on their whole outputs; return the outputs without the hidden ones."""
    for sink in sinks:
        if sink.output in outputs:
            fire(sink, outputs[sink.output])
    return {k: v for k, v in outputs.items() if not is_sink_output(k)}
