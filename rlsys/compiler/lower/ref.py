"""The reference interpreter: the executable specification of recurrent-tensor programs.

It computes a program the way its semantics read, one point at a time, on demand:

    def value(node, point):                       # point: one coordinate per domain dim
        env = dict(zip(node.domain, point)) | bounds
        if node.op == "merge":                    # a placeholder
            branch = first b in node.branches with point inside b.region
            return read(branch.edge, env)
        inputs = [read(edge, env) for edge in node.inputs]
        return rule(node.op).point(*inputs, **node.params)

    def read(edge, env):                          # one producer point, or a grid for slices
        points = product(range(s.start, s.stop) if slice else [expr] for each index, at env)
        return stack([value(edge.node, p) for p in points])   # slice axes lead

A host op (a gymnasium vector environment) is called once for all the points of its batch
dims, in the order the points are demanded; data dependences (obs[t + 1] needs step[t])
order the calls of one environment as the JAX lowering does.

It is slow and simple on purpose; every fast lowering is tested against it. Recursion is
replaced by an explicit stack so long recurrences (T = 10k) do not overflow Python's stack,
and a point that needs itself is reported as a cycle with the chain of points.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rlsys.compiler.autodiff import path_nodes
from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.index import Bound, Slice
from rlsys.compiler.ir import Edge, Graph, Node
from rlsys.compiler.lower.jax import call_host
from rlsys.compiler.rules import RULES

Point = tuple[int, ...]
Key = tuple[int, Point]


class Read:
    """The producer points one edge reads at one consumer point, and how to assemble them."""

    __slots__ = ("grid", "keys")

    def __init__(self, keys: list[Key], grid: tuple[int, ...]) -> None:
        self.keys = keys
        self.grid = grid  # the slice axes' lengths; () for a single point


class ReferenceInterpreter:
    """`host_batch[node]`: for each host op, the dims it is called for all at once (the
    JAX lowering's vector dims of that op; a vector environment steps every b together)."""

    def __init__(
        self,
        graph: Graph,
        bounds: Mapping[Bound, int],
        inputs: Mapping[str, Any],
        traced: bool = False,
        host_batch: Mapping[int, frozenset] | None = None,
    ):
        self.graph = graph
        self.bounds = dict(bounds)
        self.inputs = {k: np.asarray(v) for k, v in inputs.items()}
        self.memo: dict[Key, Any] = {}
        self.traced = traced  # inside jax.grad: keep JAX values, never convert to NumPy
        self.host_batch = dict(host_batch or {})

    # -- the semantics ----------------------------------------------------------------------
    def env(self, node: Node, point: Point) -> dict:
        return {**self.bounds, **dict(zip(node.domain, point, strict=True))}

    def read(self, consumer: Node, edge: Edge, env: dict) -> Read:
        producer = self.graph[edge.node]
        axes: list[list[int]] = []
        grid: list[int] = []
        for dim, item in zip(producer.domain, edge.index, strict=True):
            bound = self.bounds[dim.bound]
            if isinstance(item, Slice):
                start, stop = int(item.start.evaluate(env)), int(item.stop.evaluate(env))
                if stop < start:
                    message = f"slice {item} of {producer.label()} has negative length"
                    raise RecurrenceError(_where(consumer, f"{message} at {_point_text(env)}"))
                coords = list(range(start, stop))
                grid.append(len(coords))
            else:
                coords = [int(item.evaluate(env))]
            for c in coords:
                if not 0 <= c < bound:
                    raise RecurrenceError(_where(consumer, (
                        f"reads {producer.label()} at {dim.name}={c} (index {item}, at "
                        f"{_point_text(env)}), outside 0..{bound - 1}")))  # fmt: skip
            axes.append(coords)
        keys = [(producer.id, p) for p in itertools.product(*axes)]
        return Read(keys, tuple(grid))

    def reads(self, node: Node, point: Point) -> list[Read]:
        if node.id in self.host_batch:  # all the points one host call computes
            return [r for p in self.batch_points(node, point) for r in self._reads(node, p)]
        return self._reads(node, point)

    def _reads(self, node: Node, point: Point) -> list[Read]:
        env = self.env(node, point)
        if node.op == "merge":
            return [self.read(node, self.branch(node, env).edge, env)]
        return [self.read(node, edge, env) for edge in node.inputs]

    def branch(self, node: Node, env: dict):
        for branch in node.branches:
            if all(int(lo.evaluate(env)) <= env[d] < int(hi.evaluate(env))
                   for d, (lo, hi) in zip(node.domain, branch.region, strict=True)):  # fmt: skip
                return branch
        raise RecurrenceError(
            _where(
                node,
                (
                    f"{node.label()} is read at {_point_text(env, node.domain)}, where none of its "
                    f"{len(node.branches)} definitions applies; add a definition that covers it"
                ),
            )
        )

    def batch_points(self, node: Node, point: Point) -> list[Point]:
        batch = self.host_batch[node.id]
        axes = [range(self.bounds[d.bound]) if d in batch else [c]
                for d, c in zip(node.domain, point, strict=True)]  # fmt: skip
        return list(itertools.product(*axes))

    def compute_host(self, node: Node, point: Point, reads: list[Read]) -> np.ndarray:
        """Call a host op once for its whole batch; memoize every point it computed."""
        points = self.batch_points(node, point)
        extents = [self.bounds[d.bound] for d in node.domain if d in self.host_batch[node.id]]
        per_input = len(node.inputs)
        arguments = []
        for k in range(per_input):
            values = [self.assemble(reads[n * per_input + k]) for n in range(len(points))]
            stacked = np.stack(values)
            arguments.append(stacked.reshape(*extents, *stacked.shape[1:]))
        result = call_host(node, *arguments)
        flat = result.reshape(len(points), *result.shape[len(extents) :])
        for p, value in zip(points, flat, strict=True):
            self.memo[(node.id, p)] = value
        return self.memo[(node.id, point)]

    def compute(self, node: Node, point: Point, reads: list[Read]) -> np.ndarray:
        if node.id in self.host_batch:
            return self.compute_host(node, point, reads)
        values = [self.assemble(r) for r in reads]
        params = dict(node.params)
        if node.op == "const":
            return params["value"].array
        if node.op == "input":
            return self.input_value(node, point)
        if node.op == "dim_value":
            return np.asarray(params["expr"].evaluate(self.env(node, point)), dtype="int32")
        if node.op in ("index", "merge"):
            return values[0]
        if node.op == "grad":
            return self.grad_value(node, point)
        result = RULES[node.op].point(*values, **params)
        return result if self.traced else np.asarray(result)

    def grad_value(self, node: Node, point: Point) -> np.ndarray:
        """d loss / d param at this point: re-evaluate loss with param as a JAX variable."""
        loss_edge, param_edge = node.inputs
        env = self.env(node, point)
        loss_key = self.read(node, loss_edge, env).keys[0]
        param_key = self.read(node, param_edge, env).keys[0]
        path = path_nodes(self.graph, param_edge.node, loss_edge.node, ())

        def loss_of(theta):
            sub = ReferenceInterpreter(self.graph, self.bounds, self.inputs, traced=True,
                                       host_batch=self.host_batch)  # fmt: skip
            sub.memo = {k: v for k, v in self.memo.items()
                        if k[0] not in path or k[0] == param_edge.node}  # fmt: skip
            sub.memo[param_key] = theta
            return jnp.sum(sub.value(*loss_key))

        return np.asarray(jax.grad(loss_of)(jnp.asarray(self.memo[param_key])))

    def assemble(self, read: Read) -> np.ndarray:
        values = [self.memo[k] for k in read.keys]
        if not read.grid:
            return values[0]
        xp = jnp if self.traced else np
        stacked = xp.stack(values) if values else xp.zeros((0,))
        return stacked.reshape(*read.grid, *stacked.shape[1:])

    def input_value(self, node: Node, point: Point) -> np.ndarray:
        name = node.param("name")
        if name not in self.inputs:
            raise RecurrenceError(f"input {name!r} was not given to run(); pass it by name")
        return self.inputs[name][point]

    # -- evaluation order -------------------------------------------------------------------
    def value(self, node_id: int, point: Point) -> np.ndarray:
        """Evaluate one point, computing what it needs first (depth-first, memoized)."""
        stack: list[Key] = [(node_id, point)]
        visiting: dict[Key, list[Read]] = {}
        while stack:
            key = stack[-1]
            if key in self.memo:
                stack.pop()
                continue
            node = self.graph[key[0]]
            if key not in visiting:
                visiting[key] = self.reads(node, key[1])
                missing = [k for r in visiting[key] for k in r.keys if k not in self.memo]
                for dep in missing:
                    if dep in visiting:
                        raise self.cycle_error(stack, visiting, dep)
                stack.extend(missing)
                if missing:
                    continue
            self.memo[key] = self.compute(node, key[1], visiting.pop(key))
            stack.pop()
        return self.memo[(node_id, point)]

    def cycle_error(self, stack: list[Key], visiting: dict, again: Key) -> RecurrenceError:
        ancestors = [k for k in stack if k in visiting]  # the chain of points being computed
        path = [*ancestors[ancestors.index(again) :], again]
        chain = " -> ".join(self.key_text(k) for k in path[-6:])
        node = self.graph[again[0]]
        advice = "a recurrence needs a base case and a shifted index, e.g. x[t + 1] = f(x[t])"
        return RecurrenceError(
            _where(node, f"{self.key_text(again)} depends on itself ({chain}); {advice}")
        )

    def key_text(self, key: Key) -> str:
        node = self.graph[key[0]]
        coords = ", ".join(f"{d.name}={c}" for d, c in zip(node.domain, key[1], strict=True))
        return f"{node.label()}[{coords}]"

    def run(self) -> dict[str, np.ndarray]:
        outputs = {}
        for name, edge in self.graph.outputs:
            node = self.graph[edge.node]
            extents = [self.bounds[d.bound] for d in node.domain]
            points = list(itertools.product(*(range(n) for n in extents)))
            values = [np.asarray(self.value(node.id, p)) for p in points]
            shape = values[0].shape if values else ()
            outputs[name] = np.stack(values).reshape(*extents, *shape) if extents else values[0]
        return outputs


def _point_text(env: dict, dims=None) -> str:
    items = [(d, v) for d, v in env.items() if not isinstance(d, Bound)]
    if dims is not None:
        items = [(d, env[d]) for d in dims]
    return ", ".join(f"{d.name}={v}" for d, v in items) or "the only point"


def _where(node: Node, message: str) -> str:
    line = f" (defined at {node.source})" if node.source else ""
    return f"{node.label()}: {message}{line}"
