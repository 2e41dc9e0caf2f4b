"""The "where the time goes" verdict: rules picked from the dominant operation and category."""

from __future__ import annotations

import pytest
from profile_fixtures import SIMULATION_HEAVY, make_summary

from rlsys.profiler.verdict import RULES, advice, comparison_verdict, dominant_category, verdict
from rlsys.trace import Category as C


def test_simulation_on_the_cpu_says_add_actors() -> None:
    (sentence,) = verdict(make_summary(SIMULATION_HEAVY))
    assert sentence.startswith("78% of the run is simulation (simulator, 100% of its time)")
    assert "add actors" in sentence


@pytest.mark.parametrize(
    ("operation", "category", "expected"),
    [
        ("backpropagation", C.BACKEND, "larger batches"),
        ("backpropagation", None, "interpreter overhead in training"),
        ("inference", None, "interpreter overhead in inference"),
        ("inference", C.CUDA_API, "CUDA API"),
        ("rollout", C.WAIT, "unbalanced"),
        ("(no operation)", None, "annotate"),
    ],
)
def test_the_dominant_pair_picks_the_advice(operation, category, expected) -> None:
    summary = make_summary([(operation, 0.0, 0.6, category), ("other", 0.6, 1.0, None)])
    assert expected in verdict(summary)[0]
    assert verdict(summary)[0].startswith(f"60% of the run is {operation}")


def test_every_category_has_advice_for_an_unknown_operation() -> None:
    for category in ("python", "simulator", "backend", "cuda_api", "compile", "comm", "wait",
                     "overhead", "gpu"):  # fmt: skip
        assert advice("my own op", category), category


def test_rules_are_ordered_specific_before_general() -> None:
    # A catch-all rule for a category must come after every specific rule of that category.
    for i, rule in enumerate(RULES):
        if rule.operation == "*":
            later = RULES[i + 1 :]
            assert not [r for r in later if r.category == rule.category], rule


def test_gpu_only_time_dominating_counts_as_gpu() -> None:
    times = {"categories": {"python": 0.2}, "resources": {"gpu_only": 0.8}}
    assert dominant_category(times) == ("gpu", pytest.approx(0.8))


def test_a_partial_profile_says_so_first() -> None:
    summary = make_summary(SIMULATION_HEAVY, stopped_by="interrupt")
    sentences = verdict(summary)
    assert sentences[0].startswith("This profile is partial")
    assert "add actors" in sentences[1]


def test_comparison_names_the_speedup_and_the_largest_change() -> None:
    before = make_summary(SIMULATION_HEAVY)
    after = make_summary([("simulation", 0.0, 0.3, C.SIMULATOR),
                          ("backpropagation", 0.3, 0.5, C.BACKEND)])  # fmt: skip
    total, change = comparison_verdict(before, after, ("a", "b"))
    assert total == "b took 0.500 s against 1.000 s for a: 2.00x faster."
    assert change == "The largest change: simulation shrank by 0.480 s."
