"""Stages: where a program leaves the compiled world for the host, and what runs where.

A host op (a gymnasium `env.step`) runs Python, so no jitted function can contain it
without a callback, and a callback inside a scan costs more than the environment step it
makes (an ordered `io_callback` measured about 130 us per call on CPU, a jitted call about
12 us). So every loop that contains a host op, directly or in a loop nested in it, is a
**host loop**: it runs in Python, and the host-free runs of steps between its host ops are
each one jitted function (`lower/jax_staged.py`).

The stages name that split for `explain()` and for the runtime. Inside the iteration loop,
everything up to and including the last step that contains a host op is the **act** stage
(acting: policy, environment, what the environment's outputs feed before the next step); the
steps after it are the **learn** stage (returns, losses, gradients, parameter updates).
Steps before the iteration loop are **setup**, those after it **finish** (a program with
host ops and no iteration loop is one act stage and one learn stage). A program without
host ops has one stage, **main**: its iteration is one jitted function.
"""

from __future__ import annotations

from collections.abc import Iterable

from rlsys.compiler.ir import Graph
from rlsys.compiler.rules import RULES
from rlsys.compiler.schedule import Compute, Loop, Schedule, Step


def is_host_op(graph: Graph, node_id: int) -> bool:
    return RULES[graph[node_id].op].host is not None


def has_host(graph: Graph, step: Step) -> bool:
    """Whether the step is a host op or a loop that contains one."""
    if isinstance(step, Compute):
        return is_host_op(graph, step.node)
    return any(is_host_op(graph, m) for m in step.members)


def host_loop_dims(graph: Graph, schedule: Schedule) -> dict[int, set]:
    """For each node, the dims of the enclosing loops that run on the host."""
    dims: dict[int, set] = {}

    def walk(steps, outer: set) -> None:
        for step in steps:
            if isinstance(step, Compute):
                dims[step.node] = set(outer)
            else:
                walk(step.body, outer | {step.dim} if has_host(graph, step) else outer)

    walk(schedule.steps, set())
    return dims


def stage_names(graph: Graph, schedule: Schedule) -> dict[int, str]:
    """The stage of every scheduled node (see the module docstring)."""
    if not any(has_host(graph, s) for s in schedule.steps):
        return {node: "main" for node in schedule.loops_of}
    names: dict[int, str] = {}
    iteration = graph.dims[0]
    loop_at = next((k for k, s in enumerate(schedule.steps)
                    if isinstance(s, Loop) and s.dim is iteration), None)  # fmt: skip
    if loop_at is None:  # no iteration loop: the program is one act-then-learn pass
        return _body_stages(graph, schedule.steps)
    for k, step in enumerate(schedule.steps):
        if k != loop_at:
            names.update(dict.fromkeys(_all_nodes(step), "setup" if k < loop_at else "finish"))
    names.update(_body_stages(graph, schedule.steps[loop_at].body))
    return names


def _body_stages(graph: Graph, body: tuple[Step, ...]) -> dict[int, str]:
    last_host = max((k for k, s in enumerate(body) if has_host(graph, s)), default=-1)
    names: dict[int, str] = {}
    for k, step in enumerate(body):
        names.update(dict.fromkeys(_all_nodes(step), "act" if k <= last_host else "learn"))
    return names


def _all_nodes(step: Step) -> Iterable[int]:
    if isinstance(step, Compute):
        return (step.node,)
    return [n for inner in step.body for n in _all_nodes(inner)]
