"""Overhead calibration: the estimator and the correction exactly under a fake clock, and the
recovery of a real injected per-event cost in subprocesses."""

from __future__ import annotations

import json
import statistics
import sys
import textwrap
from pathlib import Path

import pytest

import rlsys
from rlsys.cli import main
from rlsys.profiler import calibrate, sources
from rlsys.profiler.breakdown import breakdown
from rlsys.profiler.calibrate import CONFIGURATIONS, Calibration, Run
from rlsys.profiler.summary import load_summary
from rlsys.trace import Session
from rlsys.trace.annotate import Recorder

US = 1_000
ANNOTATION_COST = 5 * US  # injected per OPERATION event
CCALL_COST = 2 * US  # injected per BACKEND event
ITERATIONS = 50


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


def fake_run(directory: Path, enabled: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> Run:
    """One run of a fake workload, each recorded event costing its source's injected time.

    Uninstrumented, an iteration is 10 us outside any operation, then "inference": 4 us of
    Python, a 30 us backend call, 6 us of Python. Recording an event advances the clock
    when it is emitted, i.e. after its end, as real bookkeeping does.
    """
    clock = FakeClock()
    emit_raw = Recorder.emit_raw

    def emit_with_cost(self, name, category, *args, **kwargs):  # type: ignore[no-untyped-def]
        emit_raw(self, name, category, *args, **kwargs)
        cost = {"operation": ANNOTATION_COST, "backend": CCALL_COST}.get(category, 0)
        clock.advance(cost)

    monkeypatch.setattr(Recorder, "emit_raw", emit_with_cost)
    recorder = rlsys.start_recording(directory, clock=clock) if enabled else None
    try:
        started = clock()
        for _ in range(ITERATIONS):
            clock.advance(10 * US)
            with rlsys.operation("inference"):
                clock.advance(4 * US)
                start = clock()
                clock.advance(30 * US)
                if recorder is not None and sources.CCALLS in enabled:
                    recorder.emit_raw("mm", "backend", start, clock(), recorder.thread_state().tid)
                clock.advance(6 * US)
        wall = clock() - started
    finally:
        if recorder is not None:
            rlsys.stop_recording()
    monkeypatch.setattr(Recorder, "emit_raw", emit_raw)
    events = calibrate.count_events(directory) if enabled else {}
    return Run(next(n for n, e in CONFIGURATIONS if e == enabled), wall, events)


@pytest.fixture
def fake_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Run]:
    return {
        name: fake_run(tmp_path / name, enabled, monkeypatch) for name, enabled in CONFIGURATIONS
    }


def test_estimate_recovers_injected_costs_exactly_under_a_fake_clock(fake_runs) -> None:
    calibration = calibrate.estimate(list(fake_runs.values()), ["fake"])
    assert calibration.cost_ns == {"annotations": ANNOTATION_COST, "ccalls": CCALL_COST}
    assert calibration.uninstrumented_seconds == ITERATIONS * 50 * US / 1e9
    assert calibration.events["annotations+ccalls"]["ccalls"] == ITERATIONS
    assert not calibration.warnings


def test_correction_recovers_the_uninstrumented_times_exactly(fake_runs, tmp_path) -> None:
    calibration = calibrate.estimate(list(fake_runs.values()), ["fake"])
    result = breakdown(Session.load_dir(tmp_path / "annotations+ccalls"))
    inference = result.operations["inference"]
    assert inference.wall_ns == ITERATIONS * (40 + 2) * US  # one backend record inside
    fixed = calibrate.correct(result, calibration.cost_ns)["inference"]
    assert fixed["wall_ns"] == ITERATIONS * 40 * US
    assert fixed["cpu_ns"]["python"] == ITERATIONS * 10 * US
    assert fixed["cpu_ns"]["backend"] == ITERATIONS * 30 * US
    # The operation's own record costs time after it ends: outside it, in the time around.
    around = calibrate.correct(result, calibration.cost_ns)["(no operation)"]
    assert around["overhead_ns"] == ITERATIONS * ANNOTATION_COST
    profiled = fake_runs["annotations+ccalls"].wall_ns / 1e9
    totals = calibrate.totals(profiled, result, calibration)
    assert totals["corrected_seconds"] == pytest.approx(calibration.uninstrumented_seconds)
    assert totals["bias"] == pytest.approx(0.0, abs=1e-9)
    assert totals["inflation"] == pytest.approx(profiled / calibration.uninstrumented_seconds)


def test_noise_that_makes_a_cost_negative_is_clamped_and_reported() -> None:
    runs = [
        Run("none", 1_000_000, {}),
        Run("annotations", 900_000, {"annotations": 100}),
        Run("annotations+ccalls", 1_100_000, {"annotations": 100, "ccalls": 0}),
    ]
    calibration = calibrate.estimate(runs)
    assert calibration.raw_cost_ns["annotations"] == -1_000
    assert calibration.cost_ns == {"annotations": 0.0, "ccalls": 0.0}
    assert any("negative" in w for w in calibration.warnings)
    assert any("no ccalls events" in w for w in calibration.warnings)


def test_estimates_that_vary_between_rounds_are_reported() -> None:
    runs = []
    for extra_ns in (100_000, 500_000):  # 1 us and 5 us per event in two rounds
        runs += [
            Run("none", 1_000_000, {}),
            Run("annotations", 1_000_000 + extra_ns, {"annotations": 100}),
            Run("annotations+ccalls", 1_000_000 + extra_ns, {"annotations": 100, "ccalls": 10}),
        ]
    calibration = calibrate.estimate(runs)
    assert calibration.round_cost_ns["annotations"] == (1_000, 5_000)
    assert calibration.cost_ns["annotations"] == 3_000  # the median of the two rounds
    assert any("annotations cost varies from 1000 to 5000" in w for w in calibration.warnings)
    steady = calibrate.estimate(runs[:3] + runs[:3])
    assert not any("varies" in w for w in steady.warnings)


def test_a_missing_configuration_is_a_clear_error() -> None:
    with pytest.raises(calibrate.CalibrationError, match="no run of configuration 'none'"):
        calibrate.estimate([Run("annotations", 1, {"annotations": 1})])


def test_calibrations_are_cached_per_command(tmp_path, monkeypatch, fake_runs) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calibration = calibrate.estimate(list(fake_runs.values()), ["python", "a.py"])
    assert calibrate.load_cached(["python", "a.py"]) is None
    path = calibrate.save_cached(calibration)
    assert path.parent == tmp_path / "cache" / "rlsys" / "calibration"
    assert calibrate.load_cached(["python", "a.py"]) == calibration
    assert calibrate.load_cached(["python", "b.py"]) is None
    # A change to the instrumentation's code makes the cached costs stale.
    monkeypatch.setattr(calibrate, "instrumentation_fingerprint", lambda: "changed")
    assert calibrate.load_cached(["python", "a.py"]) is None
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path.write_text("{not json")
    with pytest.raises(calibrate.CalibrationError, match="--recalibrate"):
        calibrate.load_cached(["python", "a.py"])


def test_bad_calibration_options_fail_in_one_line(tmp_path, capsys) -> None:
    script = tmp_path / "x.py"
    script.write_text("")
    code = main(["profile", "--calibrate", "--calibration-runs", "0", "--", str(script)])
    assert code == 2
    assert "--calibration-runs must be at least 1" in capsys.readouterr().err
    code = main(["profile", "--calibrate", "--max-seconds", "3", "--", str(script)])
    assert code == 2
    assert "--calibrate needs the command to run to its end" in capsys.readouterr().err


def test_unknown_source_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown source 'cuda'"):
        sources.enabled({sources.SOURCES_ENV: "annotations,cuda"})
    assert sources.enabled({sources.SOURCES_ENV: "annotations"}) == {"annotations"}
    assert sources.enabled({}) == set(sources.SOURCES)


ANNOTATION_LOOP = """
    import rlsys
    for _ in range({n}):
        with rlsys.operation("x"):
            pass
"""
INJECTED_NS = 5_000
EVENTS = 100_000
ROUNDS_PER_BATCH = 6
BATCHES = 3


def test_calibration_recovers_a_real_injected_cost_within_20_percent(tmp_path, monkeypatch):
    """A 5 us busy-wait per recorded event, injected into a real profiled command, is what the
    estimator measures against the same command whose hook waits 0 us (its baseline
    configuration), +-20%.

    Time-based by nature. 100k events make the injected total 0.5 s of CPU time per run; the
    estimate is the median over rounds of back-to-back run pairs. On a loaded 2-core machine
    one pair is off by up to +-40% (other programs slow the run's own work; with 50k events
    the run-to-run noise was ~1.5 us per event under load, and 18 rounds once landed at
    +28%), so when a batch
    of 6 rounds is not within 20%, up to two more batches are added and the median is taken
    over all of them: a right estimator converges into the band, a wrong one does not.
    """
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(ANNOTATION_LOOP.format(n=EVENTS)))
    command = [sys.executable, str(script)]
    annotations = (sources.ANNOTATIONS,)
    configurations = (("baseline", ()), ("injected", annotations))
    runs: list[Run] = []
    for _ in range(BATCHES):
        for _ in range(ROUNDS_PER_BATCH):
            for name, wait_ns in (("baseline", 0), ("injected", INJECTED_NS)):
                monkeypatch.setenv(sources.TEST_EVENT_COST_ENV, str(wait_ns))
                runs.append(calibrate.run_configuration(command, name, annotations))
        estimate = calibrate.estimate(runs, configurations=configurations)
        recovered = estimate.raw_cost_ns["annotations"]
        if recovered == pytest.approx(INJECTED_NS, rel=0.2):
            break
    assert {r.events["annotations"] for r in runs} == {EVENTS}
    spread = statistics.pstdev(r.cpu_ns for r in runs if r.configuration == "baseline") / EVENTS
    assert recovered == pytest.approx(INJECTED_NS, rel=0.2), (
        f"recovered {recovered:.0f} ns per event over {len(runs) // 2} rounds "
        f"(noise ~{spread:.0f} ns per event)"
    )


def test_profile_with_calibration_reports_corrected_totals(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(ANNOTATION_LOOP.format(n=2_000)))

    def profile(out: Path) -> int:
        args = ["profile", "--calibrate", "--calibration-runs", "1", "--quiet"]
        return main([*args, "--out", str(out), "--", str(script)])

    assert profile(tmp_path / "first") == 0
    assert "calibration saved" in capsys.readouterr().err
    summary = load_summary(tmp_path / "first")
    totals = summary["totals"]
    for key in ("uncorrected_seconds", "corrected_seconds", "uninstrumented_seconds", "bias"):
        assert totals[key] is not None
    assert summary["calibration"]["cost_ns"].keys() == {"annotations", "ccalls"}
    x = summary["operations"]["x"]
    assert x["corrected"]["seconds"] <= x["seconds"]
    # Second time: the cached calibration, no calibration runs.
    assert profile(tmp_path / "again") == 0
    assert "using the cached calibration" in capsys.readouterr().err


def test_calibration_round_trips_through_json(fake_runs) -> None:
    calibration = calibrate.estimate(list(fake_runs.values()), ["x"])
    assert Calibration.from_dict(json.loads(json.dumps(calibration.to_dict()))) == calibration


def test_count_events_counts_packed_intervals_per_source(tmp_path: Path) -> None:
    recorder = rlsys.start_recording(tmp_path / "trace")
    try:
        times = recorder.interval_buffer("backend", 1, ["mm", "add"])
        for k in range(250):
            times.extend([k % 2, 10 * k, 10 * k + 4])
            if k == 100:
                recorder.flush()  # two packed records
        with rlsys.operation("inference"):
            pass
    finally:
        rlsys.stop_recording()
    counts = calibrate.count_events(tmp_path / "trace")
    assert counts[sources.CCALLS] == 250
    assert counts[sources.ANNOTATIONS] == 1


def test_count_events_skips_damaged_lines(tmp_path: Path) -> None:
    rlsys.start_recording(tmp_path / "trace")
    try:
        with rlsys.operation("inference"):
            pass
    finally:
        rlsys.stop_recording()
    junk = ['["event","x","no-such-category",1,2]\n', '["intervals","backend",1,2,"many"]\n',
            '["event","x",["a"],1,2]\n', '["event"\n']  # fmt: skip
    (tmp_path / "trace" / "stray.jsonl").write_text("".join(junk))
    counts = calibrate.count_events(tmp_path / "trace")
    assert counts[sources.ANNOTATIONS] == 1 and counts[sources.CCALLS] == 0
