"""Human-readable views of a compiled program: `explain()` rows and the dependence graph.

`explain_rows` gives, for every op the outputs need, its domain, the decision for each
dimension of its domain ("vectorize", "scan", "reverse scan" for recurrences that read later
points, "host loop" for a loop that contains a host op, or "lazy" for a dim that a
lazy_where computes only where its mask holds, `lazy.py`), its stage (see `stages.py`) and
the user's line. `to_dot` writes the dependence graph for
Graphviz, each edge labelled with the index it reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsys.compiler.index import Dim
from rlsys.compiler.ir import Graph, is_identity
from rlsys.compiler.lazy import lazy_branches
from rlsys.compiler.schedule import Loop, Schedule
from rlsys.compiler.stages import host_loop_dims, stage_names


@dataclass(frozen=True)
class ExplainRow:
    node: int
    tensor: str
    op: str
    domain: tuple[str, ...]
    decisions: dict[str, str]
    stage: str
    line: str

    def as_text(self) -> str:
        decisions = " ".join(f"{d}:{how}" for d, how in self.decisions.items()) or "-"
        return (f"{self.tensor:<18} {self.op:<18} ({', '.join(self.domain)})"
                f"{'':<2} {decisions:<34} {self.stage:<6} {self.line}")  # fmt: skip


def _reverse_loops(schedule: Schedule) -> dict[int, set[Dim]]:
    reversed_dims: dict[int, set[Dim]] = {}

    def walk(steps) -> None:
        for step in steps:
            if isinstance(step, Loop):
                if step.reverse:
                    for member in step.members:
                        reversed_dims.setdefault(member, set()).add(step.dim)
                walk(step.body)

    walk(schedule.steps)
    return reversed_dims


def explain_rows(graph: Graph, schedule: Schedule) -> list[ExplainRow]:
    reverse = _reverse_loops(schedule)
    on_host = host_loop_dims(graph, schedule)
    stages = stage_names(graph, schedule)
    lazy = frozenset().union(*lazy_branches(graph, schedule.loops_of).values())
    rows = []
    for node_id in sorted(schedule.loops_of):
        node = graph[node_id]
        decisions = {}
        for dim in node.domain:
            how = schedule.decision(node, dim)
            if how == "scan" and dim in on_host.get(node_id, set()):
                how = "host loop"
            elif how == "scan" and dim in reverse.get(node_id, set()):
                how = "reverse scan"
            elif how == "vectorize" and node_id in lazy:
                how = "lazy"
            decisions[dim.name] = how
        line = f"line {node.source.line}" if node.source else ""
        rows.append(ExplainRow(node_id, node.label(), node.op, tuple(d.name for d in node.domain),
                               decisions, stages[node_id], line))  # fmt: skip
    return rows


def to_dot(graph: Graph, schedule: Schedule) -> str:
    lines = ["digraph rlsys {", "  rankdir=LR;", '  node [shape=box, fontname="monospace"];']
    for node_id in sorted(schedule.loops_of):
        node = graph[node_id]
        dims = ",".join(d.name for d in node.domain)
        scans = ",".join(d.name for d in schedule.loops_of[node_id])
        label = f"{node.label()}\\n{node.op} ({dims})" + (f"\\nscan {scans}" if scans else "")
        lines.append(f'  n{node_id} [label="{label}"];')
    for node_id in sorted(schedule.loops_of):
        for edge in graph[node_id].all_edges():
            producer = graph[edge.node]
            attrs = "" if is_identity(edge, producer) else (
                f' [label="[{", ".join(str(i) for i in edge.index)}]"]')  # fmt: skip
            lines.append(f"  n{edge.node} -> n{node_id}{attrs};")
    lines.append("}")
    return "\n".join(lines) + "\n"
