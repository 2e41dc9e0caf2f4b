"""The immutable IR: op nodes with domains, joined by edges that carry index expressions.

A `Node` computes one value per point of its `domain` (a tuple of program dimensions, in
program order); each value is an array of the node's spatial `shape` and `dtype`. An `Edge`
says which point of the producer a consumer point reads: one index (an `IndexExpr` or a
`Slice`) per dimension of the producer's domain, written in terms of the consumer's
dimensions. Ordinary ops read their inputs with the identity index; `index` nodes and the
branches of `merge` nodes (placeholders) carry the interesting ones.

A `Graph` is a frozen mapping from node ids to nodes plus the named outputs. Passes take a
graph and return a new one (`Graph.replace`); nothing here mutates.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from rlsys.compiler.index import Dim, Index, IndexExpr, as_expr


@dataclass(frozen=True)
class SourceLine:
    """Where in the user's program a node was written: for error messages and explain()."""

    file: str
    line: int
    code: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.code}"


@dataclass(frozen=True)
class Edge:
    """Read `node` at the point given by `index` (one entry per dim of the producer)."""

    node: int
    index: tuple[Index, ...]

    def dims(self) -> frozenset[Dim]:
        """The consumer dimensions this read depends on."""
        return frozenset().union(*(i.dims() for i in self.index))


@dataclass(frozen=True)
class Branch:
    """One definition of a placeholder: where it applies and what it reads there.

    `region[k]` is the (lo, hi) range, half-open, of the placeholder's k-th dimension where
    this branch applies; the branch reads `edge` (whose index maps a placeholder point to a
    point of the defining expression).
    """

    region: tuple[tuple[IndexExpr, IndexExpr], ...]
    edge: Edge
    source: SourceLine | None = None


@dataclass(frozen=True)
class Node:
    id: int
    op: str
    inputs: tuple[Edge, ...]
    domain: tuple[Dim, ...]
    shape: tuple[int, ...]
    dtype: str
    params: tuple[tuple[str, Any], ...] = ()
    branches: tuple[Branch, ...] = ()  # only for op == "merge"
    name: str | None = None
    source: SourceLine | None = None

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    def label(self) -> str:
        """How errors and explain() name this node: the user's name, else op#id."""
        return self.name or f"{self.op}#{self.id}"

    def all_edges(self) -> tuple[Edge, ...]:
        return self.inputs + tuple(b.edge for b in self.branches)


def identity_index(producer: tuple[Dim, ...]) -> tuple[IndexExpr, ...]:
    return tuple(as_expr(d) for d in producer)


def is_identity(edge: Edge, producer: Node) -> bool:
    return edge.index == identity_index(producer.domain)


@dataclass(frozen=True)
class Graph:
    """Nodes by id (ids grow in creation order, so they are a topological order for every
    edge except those that close a recurrence) and the program's named outputs."""

    dims: tuple[Dim, ...]
    nodes: Mapping[int, Node] = field(default_factory=dict)
    outputs: tuple[tuple[str, Edge], ...] = ()
    sinks: tuple[Any, ...] = ()  # sinks.Sink: user functions fed from hidden outputs

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", MappingProxyType(dict(self.nodes)))

    def __getitem__(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())

    def replace(self, **changes: Any) -> Graph:
        return replace(self, **changes)

    def consumers(self) -> dict[int, list[int]]:
        users: dict[int, list[int]] = {n: [] for n in self.nodes}
        for node in self:
            for edge in node.all_edges():
                users[edge.node].append(node.id)
        return users


def concrete_shape(node: Node, bounds: Mapping[Any, int]) -> tuple[int, ...]:
    """The node's spatial shape with bound symbols (`T` in `x[0:T]`) replaced by values; an
    extent that varies with a dim (the variable-size slice `x[t:T]`) by its largest value,
    the padded length the JAX lowering allocates (`lower/padded.py`)."""
    return tuple(
        n if isinstance(n, int) else largest_extent(as_expr(n), bounds) for n in node.shape
    )


def largest_extent(extent: IndexExpr, bounds: Mapping[Any, int]) -> int:
    dims = sorted(extent.dims(), key=lambda d: d.name)
    env: dict[Any, Any] = dict(bounds)
    for k, dim in enumerate(dims):  # every point of the dims it varies with, at once
        shape = [1] * len(dims)
        shape[k] = bounds[dim.bound]
        env[dim] = np.arange(bounds[dim.bound]).reshape(shape)
    return max(0, int(np.max(extent.evaluate(env))))
