"""Index expressions and the indexing table (domain and shape of every kind of index)."""

from __future__ import annotations

import numpy as np
import pytest

from rlsys.compiler.errors import RecurrenceError
from rlsys.compiler.index import Dim, Slice, as_expr, index_max, index_min
from rlsys.compiler.indexing import apply_index

a, b, t = Dim("a"), Dim("b"), Dim("t")
A, B, T = a.bound, b.bound, t.bound
ORDER = (a, b, t)
SHAPE = ("C", "D")


def test_canonical_forms_compare_equal() -> None:
    assert t + 1 == 1 + t
    assert (t + 2) - 1 == t + 1
    assert t - t == as_expr(0)
    assert hash(T - 1) == hash(-1 + T)
    assert str(2 * t - T + 3) == "2*t-T+3"


def test_min_max_fold_constant_differences() -> None:
    assert index_min(t + 1, t + 3) == t + 1
    assert index_max(t + 1, t + 3) == t + 3
    assert index_min(index_min(t, T - 1), T - 1) == index_min(t, T - 1)
    assert index_min(t + 3, T - 1) + 2 == index_min(t + 5, T + 1)
    assert -index_min(t, T) == index_max(-t, -T)
    assert index_min(t + 4, T) - t == index_min(as_expr(4), T - t)


def test_evaluation_on_scalars_and_arrays() -> None:
    expr = index_min(t + 3, T - 1)
    assert expr.evaluate({t: 2, T: 10}) == 5
    np.testing.assert_array_equal(expr.evaluate({t: np.arange(10), T: 10}),
                                  [3, 4, 5, 6, 7, 8, 9, 9, 9, 9])  # fmt: skip
    assert expr.substitute({T: 10}) == index_min(t + 3, 9)


def test_bad_index_arithmetic_is_an_error() -> None:
    with pytest.raises(RecurrenceError, match="cannot multiply index expressions"):
        t * t
    with pytest.raises(RecurrenceError, match="inside `with prog:`"):
        t * 1.5  # a float makes a tensor of t's values, which needs a program
    with pytest.raises(RecurrenceError, match="a min and a max do not combine"):
        index_min(t, T) + index_max(t, 0)


def idx(raw, domain=(a, b)):
    result = apply_index(domain, SHAPE, raw, ORDER, "x")
    return result.domain, result.shape


# One test per row of the indexing table (rlsys/compiler/indexing.py docstring).
@pytest.mark.parametrize(
    ("raw", "domain", "shape"),
    [
        (0, (b,), SHAPE),
        ((0, 1), (), SHAPE),
        ((slice(None), 1), (a,), SHAPE),
        ((slice(None), slice(5, 10)), (a,), (5, *SHAPE)),
        (Ellipsis, (a, b), SHAPE),
        ((a, b), (a, b), SHAPE),
        ((a + 1, b), (a, b), SHAPE),
        ((index_min(a + 10, A - 1), b), (a, b), SHAPE),
        ((slice(0, 5), b), (b,), (5, *SHAPE)),
        (slice(0, a + 1), (a, b), (a + 1, *SHAPE)),
        ((slice(0, A), slice(0, B)), (), (as_expr(A), as_expr(B), *SHAPE)),
        ((A - 1,), (b,), SHAPE),
        ((slice(a, A),), (a, b), (A - a, *SHAPE)),
        ((slice(a, index_min(a + 4, A)),), (a, b), (index_min(as_expr(4), A - a), *SHAPE)),
    ],
)
def test_indexing_table(raw, domain, shape) -> None:
    assert idx(raw) == (domain, shape)


def test_index_with_another_dimension_moves_the_domain() -> None:
    assert idx((t, b)) == ((b, t), SHAPE)


def test_edge_index_has_one_entry_per_dimension() -> None:
    result = apply_index((a, b), SHAPE, (a + 1,), ORDER, "x")
    assert result.index == (a + 1, as_expr(b))
    sliced = apply_index((a, b), SHAPE, slice(0, A), ORDER, "x")
    assert sliced.index == (Slice(as_expr(0), as_expr(A)), as_expr(b))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ((a, b, t), "domain \\(a, b\\) but was indexed with 3 indices"),
        (slice(5, 2), "negative length"),
        (slice(0, None), "write both ends"),
        (slice(0, A, 2), "step"),
        ((Ellipsis, Ellipsis), "at most one"),
        (1.5, "not an index expression"),
    ],
)
def test_bad_indices_are_clear_errors(raw, message) -> None:
    with pytest.raises(RecurrenceError, match=message):
        idx(raw)


def test_dimension_of_another_program_is_an_error() -> None:
    stranger = Dim("s")
    with pytest.raises(RecurrenceError, match="does not declare"):
        idx(stranger)
