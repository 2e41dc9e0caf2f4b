"""`lazy_where(mask, value, otherwise, rows)`: where(mask, value, otherwise), computing
`value`'s own ops only at the points where the mask holds.

The ops that only `value` needs (its *branch*: the nodes it depends on that nothing else
the program computes depends on) keep their place in the schedule, which orders them and
keeps what they read, but are *deferred*: the lowering skips them there, and the
lazy_where node runs them itself. It lists the points where the mask holds and, `rows` of
them at a time, gathers them and runs the branch at each as at one point of a loop over
every dim, vmapped; a loop of as many passes as the count needs (none where the mask holds
nowhere) writes the results back. Only branch nodes scheduled in the same loops as the
lazy_where are deferred (others, such as one inside a scan over t, are computed as usual).

An actor-critic needs the critic's value of an episode's final observation only where the
episode was truncated, and at the rollout's last step: a few points of the rollout's
B * T (`rlsys/algos/common.py`, `next_values`), where computing them all was a third of
the learning step's forward work (actor, critic, critic on final observations).

The loop's length depends on the data, so JAX cannot differentiate through the value (a
gradient whose path does is refused at compile time). The reference lowering computes
both sides everywhere, as `where` does; the results are the same.
"""

from __future__ import annotations

from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.ir import Graph, Node
from rlsys.compiler.rules import RULES


def _reachable(graph: Graph, roots, skip: tuple[int, int] | None = None) -> set[int]:
    """Nodes the roots depend on, not following node skip[0]'s input number skip[1]."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        node_id = stack.pop()
        if node_id in seen:
            continue
        seen.add(node_id)
        edges = graph[node_id].all_edges()
        if skip is not None and node_id == skip[0]:
            edges = [e for k, e in enumerate(graph[node_id].inputs) if k != skip[1]]
        stack.extend(edge.node for edge in edges)
    return seen


def lazy_branches(graph: Graph, loops_of: dict[int, tuple]) -> dict[int, frozenset[int]]:
    """Each lazy_where node -> the nodes of its branch that it runs itself: those in the
    same loops as itself (`loops_of`, the schedule's), less those of a lazy_where inside
    the branch, which that one runs."""
    roots = [edge.node for _, edge in graph.outputs]
    branches = {}
    for node in graph:
        if node.op == "lazy_where":
            others = _reachable(graph, roots, skip=(node.id, 1))
            branch = _reachable(graph, [node.inputs[1].node]) - others
            level = loops_of.get(node.id, ())
            branches[node.id] = frozenset(n for n in branch if loops_of.get(n, ()) == level)
            hosts = [graph[n] for n in branches[node.id] if RULES[graph[n].op].host is not None]
            if hosts:
                raise RecurrenceError(
                    f"lazy_where at {node.source}: its value needs host op {hosts[0].label()}, "
                    "which cannot run conditionally inside a compiled program; compute it "
                    "outside (use it elsewhere too, or use rt.where)"
                )
    return {
        lazy: frozenset(branch.difference(*(branches[n] for n in branch if n in branches)))
        for lazy, branch in branches.items()
    }


def check_not_differentiated(graph: Graph, grad: Node, path: set[int]) -> None:
    """A gradient's path (the nodes between its parameter and its loss) must not run
    through a lazy_where's value: JAX cannot differentiate the loop that computes it."""
    for n in path:
        lazy = graph[n]
        if lazy.op == "lazy_where" and lazy.inputs[1].node in path:
            raise RecurrenceError(
                f"grad at {grad.source}: its path runs through the value of the lazy_where at "
                f"{lazy.source}, which cannot be differentiated; use rt.where there, or cut "
                "the path with .stop_gradient()"
            )
