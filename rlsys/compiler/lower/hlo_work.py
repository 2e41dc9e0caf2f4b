"""The arithmetic of a compiled XLA program: floating-point operations of its matrix products,
loops counted as many times as they run.

XLA's own cost analysis (`compiled.cost_analysis()`) counts a while loop's body once: a
100-step `lax.scan` of a 256x64 by 64x64 product reads 2.1 MFLOP, not 210. This walks the
optimized HLO text instead: a computation's products, plus those of the computations it
calls (fusions, calls; not a reduction's or a sort's own small computations), plus each
while body times its known trip count (XLA records it on the loop; a loop without one
counts once), plus the costliest branch of a conditional. Products are most of an RL
iteration's arithmetic; elementwise work is not counted.
`computations` and `while_loop` also serve `benchmarks/xla_breakdown.py`, which maps a
trace's thunks back to their loops.
"""

from __future__ import annotations

import functools
import math
import re

_HEADER = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) ")
_INSTRUCTION = re.compile(r"^\s+(?:ROOT )?%([\w.\-]+) = (.*)$")
_SHAPE = re.compile(r"^\w+\[([\d,]*)\]")
_DOT_LHS = re.compile(r"^\w+\[[\d,]*\]\S* dot\((?:\w+\[[\d,]*\]\S* )?%([\w.\-]+)")
_LHS_CONTRACTING = re.compile(r"lhs_contracting_dims=\{([\d,]*)\}")
_CALLS = re.compile(r"\bcalls=%([\w.\-]+)|^\S+ call\(.*\bto_apply=%([\w.\-]+)")
_WHILE_BODY = re.compile(r"\bwhile\(.*\bbody=%([\w.\-]+)")
_TRIPS = re.compile(r'known_trip_count":\{"n":"(\d+)"')
_BRANCHES = re.compile(r"\bbranch_computations=\{([^}]*)\}")


def _dims(text: str) -> list[int]:
    return [int(d) for d in text.split(",") if d]


def _dot_flops(instruction: str, shapes: dict[str, list[int]]) -> float:
    """2 x output elements x contracted length, for a `dot` instruction (0 otherwise)."""
    lhs_name = _DOT_LHS.search(instruction)
    out = _SHAPE.match(instruction)
    if not lhs_name or not out or lhs_name.group(1) not in shapes:
        return 0.0
    out, lhs = _dims(out.group(1)), shapes[lhs_name.group(1)]
    contracting = _LHS_CONTRACTING.search(instruction)
    contracted = math.prod(lhs[d] for d in _dims(contracting.group(1))) if contracting else 1
    return 2.0 * math.prod(out) * contracted


def computations(text: str) -> tuple[dict[str, list[tuple[str, str]]], str | None]:
    """The (instruction name, instruction text) pairs of each computation of an HLO module's
    text, in order, and the entry computation's name (instruction names are unique in a
    module)."""
    bodies: dict[str, list[tuple[str, str]]] = {}
    entry, current = None, None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith("{") and "->" in line:
            header = _HEADER.match(line)
            current = header.group(1) if header else None
            if current is not None:
                bodies[current] = []
                if line.startswith("ENTRY"):
                    entry = current
        elif current is not None and (match := _INSTRUCTION.match(line)):
            bodies[current].append(match.groups())
    return bodies, entry


def while_loop(instruction: str) -> tuple[str, int | None] | None:
    """A while instruction's body computation and its known trip count (None where XLA
    recorded none); None for any other instruction."""
    if not (body := _WHILE_BODY.search(instruction)):
        return None
    trips = _TRIPS.search(instruction)
    return body.group(1), int(trips.group(1)) if trips else None


def matmul_flops(hlo_text: str) -> float:
    """Floating-point operations of the matrix products one run of the program performs."""
    bodies, entry = computations(hlo_text)
    shapes = {name: _dims(shape.group(1)) for instructions in bodies.values()
              for name, instruction in instructions
              if (shape := _SHAPE.match(instruction))}  # fmt: skip

    @functools.cache
    def flops(name: str) -> float:
        total = 0.0
        for _, instruction in bodies.get(name, ()):
            total += _dot_flops(instruction, shapes)
            if loop := while_loop(instruction):
                body, trips = loop
                total += (trips or 1) * flops(body)
            elif called := _CALLS.search(instruction):  # a fusion, or a call
                total += flops(called.group(1) or called.group(2))
            elif branches := _BRANCHES.search(instruction):
                names = [b.strip().lstrip("%") for b in branches.group(1).split(",")]
                total += max((flops(b) for b in names if b), default=0.0)
        return total

    return flops(entry) if entry is not None else 0.0
