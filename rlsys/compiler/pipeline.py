"""The ordered, named, timed list of passes every program goes through.

Each pass is `Graph -> Graph`. In debug mode the verifier runs after every pass, so a pass
that breaks an invariant is named at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from rlsys.compiler.ir import Graph
from rlsys.compiler.passes.cse import eliminate_common_subexpressions
from rlsys.compiler.passes.dce import eliminate_dead_code
from rlsys.compiler.passes.domain import reduce_domains
from rlsys.compiler.passes.fold_index import fold_identity_index
from rlsys.compiler.passes.verify import verify

Pass = Callable[[Graph], Graph]

PIPELINE: tuple[tuple[str, Pass], ...] = (
    ("dead-code elimination", eliminate_dead_code),
    ("fold identity index", fold_identity_index),
    ("domain reduction", reduce_domains),
    ("common-subexpression elimination", eliminate_common_subexpressions),
    ("dead-code elimination (after cse)", eliminate_dead_code),
)


@dataclass(frozen=True)
class PassTiming:
    name: str
    seconds: float
    nodes_before: int
    nodes_after: int


def run_pipeline(graph: Graph, debug: bool = False) -> tuple[Graph, list[PassTiming]]:
    timings = []
    if debug:
        verify(graph)
    for name, transform in PIPELINE:
        start = time.perf_counter()
        result = transform(graph)
        timings.append(PassTiming(name, time.perf_counter() - start, len(graph.nodes),
                                  len(result.nodes)))  # fmt: skip
        if debug:
            verify(result)
        graph = result
    return graph, timings
