"""`Program`: declares dimensions, records the ops user code builds, freezes into a `Graph`.

The program being built is found through a `ContextVar` (`with prog:`), never a module
global, so two programs can be built in two threads. Every node records the line of the
user's program that created it, for error messages and `explain()`.
"""

from __future__ import annotations

import contextvars
import inspect
import linecache
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.index import Bound, Dim
from rlsys.compiler.ir import Branch, Edge, Graph, Node, SourceLine, identity_index
from rlsys.compiler.rules import RULES, TensorType
from rlsys.compiler.sinks import SINK_PREFIX, Sink, SinkFn

if TYPE_CHECKING:
    from rlsys.compiler.tensor import RecurrentTensor

_CURRENT: contextvars.ContextVar[Program | None] = contextvars.ContextVar(
    "rlsys_current_program", default=None
)
_RLSYS = Path(__file__).resolve().parents[1]
_RLSYS_DIR = str(_RLSYS) + os.sep
# rlsys's own algorithms are programs written like a user's: their lines say where a node was
# built (under `rlsys train`, the first line outside rlsys would be the command's entry point)
_PROGRAMS_DIR = str(_RLSYS / "algos") + os.sep


def _in_library(filename: str) -> bool:
    return filename.startswith(_RLSYS_DIR) and not filename.startswith(_PROGRAMS_DIR)


def user_source_line() -> SourceLine | None:
    """The innermost stack frame outside rlsys's library code: the line of the program being
    built (the user's, or one of `rlsys/algos/`) that is being executed."""
    frame = sys._getframe(1)
    while frame is not None and _in_library(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return None
    filename, line = frame.f_code.co_filename, frame.f_lineno
    return SourceLine(filename, line, linecache.getline(filename, line).strip())


def assigned_name(source: SourceLine | None) -> str | None:
    """`x` for a line like `x = rt.placeholder(...)`: a readable name for error messages."""
    match = source and re.match(r"^([A-Za-z_]\w*)\s*(?::[^=]+)?=[^=]", source.code)
    return match.group(1) if match else None


def _check_dim_names(dims: Any) -> None:
    if isinstance(dims, str):  # a string is a sequence of one-letter names: "time" is 4 dims
        raise RecurrenceError(
            f"dims={dims!r} is a string; give a sequence of names, e.g. dims=({dims!r},)"
        )
    dims = tuple(dims)
    bad = [d for d in dims if not isinstance(d, str) or not d.isidentifier()]
    if bad:
        raise RecurrenceError(f"dimension names must be identifiers like 't', got {bad[0]!r}")
    if not dims:  # the first dimension is the iteration loop every lowering is built around
        raise RecurrenceError("a program needs at least one dimension, e.g. dims=('i',)")
    if len(set(dims)) != len(dims):
        raise RecurrenceError(f"dimension names must be distinct, got {dims}")
    bounds = [d.upper() for d in dims]  # each dim's bound is named by its upper-case name
    clash = sorted({b for b in bounds if bounds.count(b) > 1})
    if clash:
        raise RecurrenceError(
            f"dimensions {', '.join(d for d in dims if d.upper() == clash[0])} would share the "
            f"bound {clash[0]} (a bound is named by its dimension in upper case); rename one"
        )


def current_program() -> Program:
    program = _CURRENT.get()
    if program is None:
        raise RecurrenceError(
            "no program is being built here; create tensors inside `with prog:` where "
            "prog = rt.Program(dims=(...))"
        )
    return program


class Program:
    """A recurrent-tensor program under construction.

    `Program(dims=("i", "b", "t"))` declares the dimensions in order (outermost first);
    `prog.dims` are the dimension symbols, `prog.bounds` their upper bounds (`I`, `B`, `T`),
    whose values are given to `compile(bounds=...)`.
    """

    def __init__(self, dims: Sequence[str] = ("i", "b", "t")) -> None:
        _check_dim_names(dims)
        self.dims: tuple[Dim, ...] = tuple(Dim(name) for name in dims)
        self.bounds: tuple[Bound, ...] = tuple(d.bound for d in self.dims)
        self._nodes: list[Node] = []
        self._branches: dict[int, list[Branch]] = {}
        self._outputs: dict[str, Edge] = {}
        self._sinks: list[Sink] = []
        self._tokens: list[contextvars.Token] = []

    def __enter__(self) -> Program:
        self._tokens.append(_CURRENT.set(self))
        return self

    def __exit__(self, *exc_info: object) -> None:
        _CURRENT.reset(self._tokens.pop())

    # -- building ---------------------------------------------------------------------------
    def order(self, dims: Sequence[Dim] | set[Dim] | frozenset[Dim]) -> tuple[Dim, ...]:
        """`dims` in program order; an error names any dimension of another program."""
        wanted = set(dims)
        stray = wanted - set(self.dims)
        if stray:
            names = ", ".join(sorted(getattr(d, "name", repr(d)) for d in stray))
            raise RecurrenceError(
                f"dimension {names} is not declared by this program (dims: "
                f"{', '.join(d.name for d in self.dims)})"
            )
        return tuple(d for d in self.dims if d in wanted)

    def add_node(
        self,
        op: str,
        inputs: Sequence[Edge],
        domain: Sequence[Dim],
        type_: TensorType,
        params: Mapping[str, Any] | None = None,
        name: str | None = None,
        source: SourceLine | None = None,
    ) -> RecurrentTensor:
        from rlsys.compiler.tensor import RecurrentTensor

        node = Node(
            id=len(self._nodes),
            op=op,
            inputs=tuple(inputs),
            domain=self.order(domain),
            shape=tuple(type_.shape),
            dtype=type_.dtype,
            params=tuple(sorted((params or {}).items())),
            name=name,
            source=source or user_source_line(),
        )
        self._nodes.append(node)
        return RecurrentTensor(self, node.id)

    def apply(self, op: str, operands: Sequence[RecurrentTensor], **params: Any) -> RecurrentTensor:
        """An ordinary op: reads each operand at the same point; domain is their union."""
        rule = RULES[op]
        source = user_source_line()
        try:
            type_ = rule.infer([t.type for t in operands], params)
        except RecurrenceError as err:
            raise type(err)(f"{err} (at {source})") from None
        domain = self.order(set().union(*(t.domain for t in operands)))
        edges = [Edge(t.node_id, identity_index(t.domain)) for t in operands]
        return self.add_node(op, edges, domain, type_, params, source=source)

    def node(self, node_id: int) -> Node:
        return self._nodes[node_id]

    def branches(self, placeholder: int) -> tuple[Branch, ...]:
        return tuple(self._branches.get(placeholder, ()))

    def add_branch(self, placeholder: int, branch: Branch) -> None:
        self._branches.setdefault(placeholder, []).append(branch)

    def output(self, name: str, tensor: RecurrentTensor) -> None:
        """Make the values of `tensor` at every point of its domain a program output."""
        if not isinstance(name, str):
            raise RecurrenceError(f"output name {name!r} is not a string; run() returns "
                                  "outputs by name, e.g. prog.output('loss', loss)")  # fmt: skip
        self._check_own(tensor, f"output {name!r}")
        if name in self._outputs or name.startswith(SINK_PREFIX):
            raise RecurrenceError(f"output {name!r} is defined twice")
        self._outputs[name] = Edge(tensor.node_id, identity_index(tensor.domain))

    def _check_own(self, tensor: Any, what: str) -> None:
        """A tensor of this program (another's node ids mean other nodes here: a KeyError at
        compile time, or the wrong tensor)."""
        from rlsys.compiler.tensor import RecurrentTensor

        if not isinstance(tensor, RecurrentTensor):
            raise RecurrenceError(
                f"{what}: {tensor!r} is not a tensor of the program; make it one first, "
                "e.g. rt.const(value)"
            )
        if tensor.program is not self:
            raise RecurrenceError(f"{what}: {tensor.label} belongs to another program")

    def sink(self, tensor: RecurrentTensor, fn: SinkFn) -> None:
        """Call `fn(point, value)` for every point of `tensor` as the run computes it (after
        each iteration for tensors of the iteration loop): logging, plotting, checks.
        `point` maps dimension names to indices. See `sinks.py`."""
        self._check_own(tensor, "sink")
        if not callable(fn):
            raise RecurrenceError(f"sink of {tensor.label}: {fn!r} is not callable")
        _check_sink_signature(fn, tensor.label)
        name = f"{SINK_PREFIX}{len(self._sinks)}"
        self._outputs[name] = Edge(tensor.node_id, identity_index(tensor.domain))
        self._sinks.append(Sink(name, fn, tuple(d.name for d in tensor.domain)))

    def graph(self) -> Graph:
        """The program as an immutable graph (placeholders carry their definitions)."""
        nodes = {}
        for node in self._nodes:
            if node.op == "merge":
                node = replace(node, branches=tuple(self._branches.get(node.id, ())))
            nodes[node.id] = node
        return Graph(self.dims, nodes, tuple(self._outputs.items()), tuple(self._sinks))

    def compile(
        self,
        bounds: Mapping[Bound | str, int],
        backend: str = "jax",
        debug: bool = False,
        iterations_per_call: int = 1,
        segmented: bool | str = False,
        devices: int | str = 1,
    ):
        """Bind the bounds, check the program, and lower it: backend "jax" (jitted JAX) or
        "ref" (the point-by-point reference interpreter). `debug=True` verifies the IR after
        every pass; `iterations_per_call=K` runs K iterations per jitted call;
        `segmented=True` compiles an iteration as several XLA programs, cut around its loops
        and after its gradients, run one iteration per call: less memory to compile, a little
        slower; "auto" only where compiling, not running, would set the peak memory (either
        also hands jaxlib's machine code back to the OS around compiling, `code_pages.py`).
        `devices=N` splits the iterations' points (the environments) over N devices, each
        running its share (a segmented program: each segment so); on CPU, first call
        `use_cpu_devices(N)` (see `lower/data_parallel.py`); "auto" keeps that split or one
        device, whichever ran its first calls faster (a segmented program: only if its call
        does SPLIT_SEGMENTED_FLOPS or more, and then, with segmented="auto", the split is
        compiled whole, `compile.py`)."""
        from rlsys.compiler.compile import compile_graph

        return compile_graph(self.graph(), bounds, backend=backend, debug=debug,
                             iterations_per_call=iterations_per_call,
                             segmented=segmented, devices=devices)  # fmt: skip


def _check_sink_signature(fn: SinkFn, label: str) -> None:
    """`fn` must take (point, value): else it failed with a TypeError only once the run had
    computed the tensor, possibly after a long first iteration."""
    try:
        inspect.signature(fn).bind(None, None)
    except ValueError:  # no signature to read (some builtins): it will be called as is
        return
    except TypeError:
        raise RecurrenceError(
            f"sink of {label}: {getattr(fn, '__name__', fn)!r} must take two arguments, "
            "(point, value): point maps dimension names to indices"
        ) from None
