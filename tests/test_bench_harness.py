"""The benchmark harness, on a fake case whose systems sleep, fork, allocate, fail or hang.

Every child here is a small Python process that imports only rlsys (no jax), so the whole
file runs in a few seconds.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from rlsys.bench.case import case_names, load_case
from rlsys.bench.measure import run_measured
from rlsys.bench.runner import Record, run_case, schedule
from rlsys.bench.table import markers, replace_section, summarize
from rlsys.cli import main
from rlsys.errors import UsageError

MIB = 1024 * 1024

FAKE_CASE = """
import os
import sys
import time

from rlsys.bench import Case, System, child_main, report


def log(name):
    with open(os.environ["FAKE_BENCH_LOG"], "a") as f:
        f.write(name + "\\n")


def plain(*, quick, seed, name):
    log(name)
    time.sleep(0.3)
    report(env_steps=1000, seconds=0.5, answer=42.0, quick=float(quick), seed=float(seed))


def fork_and_allocate(*, quick, seed, mib):
    log("fork")
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the grandchild holds `mib` MiB for a while; the runner must see it
        block = b"x" * (mib * 1024 * 1024)
        os.write(ready_w, b"1")
        time.sleep(0.4)
        os._exit(len(block) and 0)
    os.read(ready_r, 1)
    os.waitpid(pid, 0)
    report(env_steps=1, seconds=1.0)


def fail(*, quick, seed):
    for i in range(30):
        print(f"boom {i}", file=sys.stderr)
    sys.exit(1)


def silent(*, quick, seed):
    pass  # exits 0 without report()


def hang(*, quick, seed):
    pid = os.fork()
    if pid == 0:
        os.setsid()  # leaves the child's session: only tree tracking can still find it
        time.sleep(60)
        os._exit(0)
    with open(os.environ["FAKE_BENCH_PIDS"], "w") as f:
        f.write(f"{os.getpid()} {pid}")
    time.sleep(60)


CASE = Case(
    name="fake",
    description="A fake case for the harness tests.",
    baseline="a",
    unit="widgets",
    systems=[
        System("a", run=plain, params={"name": "a"}),
        System("b", run=plain, params={"name": "b"}),
        System("fork", run=fork_and_allocate, params={"mib": 50}),
        System("fail", run=fail),
        System("silent", run=silent),
        System("hang", run=hang),
        System("ghost", available=lambda: False, missing="ghost extra not installed"),
    ],
)

if __name__ == "__main__":
    child_main(CASE)
"""


@pytest.fixture
def cases_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "cases"
    directory.mkdir()
    (directory / "fake.py").write_text(FAKE_CASE)
    (directory / "_helper.py").write_text("")  # not a case: starts with _
    (directory / "notes.py").write_text("raise SystemExit('imported')\n")  # not a case
    monkeypatch.setenv("FAKE_BENCH_LOG", str(tmp_path / "order.log"))
    monkeypatch.setenv("FAKE_BENCH_PIDS", str(tmp_path / "pids.txt"))
    return directory


def _order(cases_dir: Path) -> list[str]:
    return (cases_dir.parent / "order.log").read_text().split()


def test_schedule_alternates_systems_reversing_every_repetition() -> None:
    assert schedule(["a", "b", "c"], 3) == [
        (0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"), (1, "a"), (2, "a"), (2, "b"), (2, "c"),
    ]  # fmt: skip


def test_cases_are_found_by_file_and_loaded_with_their_path(cases_dir: Path) -> None:
    assert case_names(cases_dir) == ["fake"]
    case = load_case(cases_dir, "fake")
    assert case.path == (cases_dir / "fake.py").resolve()
    assert case.system("ghost").skip_reason() == "ghost extra not installed"
    assert case.system("a").skip_reason() is None


def test_run_alternates_processes_and_writes_json_and_markdown(
    cases_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results_md = tmp_path / "RESULTS.md"
    out = tmp_path / "out"
    argv = ["bench", "run", "fake", "--systems", "a,b,ghost", "--reps", "2", "--seed", "7"]
    argv += ["--out", str(out), "--results-md", str(results_md), "--cases-dir", str(cases_dir)]
    assert main(argv) == 0
    assert _order(cases_dir) == ["a", "b", "b", "a"]

    data = json.loads((out / "fake.json").read_text())
    assert [(r["system"], r["rep"]) for r in data["records"]] == [
        ("a", 0), ("b", 0), ("b", 1), ("a", 1),
    ]  # fmt: skip
    first = data["records"][0]
    assert first["returncode"] == 0 and first["error"] is None
    assert first["rate"] == 2000.0  # 1000 widgets in 0.5 s, as reported by the child
    assert first["metrics"] == {"answer": 42.0, "quick": 0.0, "seed": 7.0}
    seeds = [r["metrics"]["seed"] for r in data["records"]]
    assert seeds == [7.0, 7.0, 8.0, 8.0]  # repetition r runs with seed + r
    assert first["wall_s"] >= 0.3  # the child slept 0.3 s: wall time is the whole process
    assert first["peak_rss_bytes"] > 5 * MIB
    assert data["machine"]["cpu_count"] == os.cpu_count()
    assert "jax" in data["machine"]["versions"]
    assert {s["name"]: s["skipped"] for s in data["systems"]} == {
        "a": None, "b": None, "ghost": "ghost extra not installed",
    }  # fmt: skip
    assert data["command"].startswith("rlsys bench run fake --reps 2 --systems a,b,ghost")

    text = results_md.read_text()
    begin, end = markers("fake")
    assert text.startswith("# Benchmark results\n")
    assert text.count(begin) == 1 and text.count(end) == 1
    assert "| a | 2 |" in text and "2.00 k" in text and "1.00×" in text
    assert "ghost extra not installed" in text
    assert "widgets/s" in capsys.readouterr().out


def test_peak_rss_includes_forked_grandchildren(cases_dir: Path) -> None:
    case = load_case(cases_dir, "fake")
    result = run_case(case, ["a", "fork"], reps=1, quick=True, seed=0)
    plain, forking = result.records
    assert plain.ok and forking.ok, (plain.error, forking.error)
    # The grandchild held 50 MiB (plus its copy of the interpreter): the sum must show it.
    assert forking.peak_rss_bytes - plain.peak_rss_bytes >= 45 * MIB


def test_failing_system_is_reported_with_its_output_and_exit_code_1(
    cases_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results_md = tmp_path / "RESULTS.md"
    results_md.write_text("# kept as it was\n")
    argv = ["bench", "run", "fake", "--systems", "a,fail,silent", "--reps", "1", "--quiet"]
    argv += ["--out", str(tmp_path / "out"), "--cases-dir", str(cases_dir)]
    assert main([*argv, "--results-md", str(results_md)]) == 1
    err = capsys.readouterr().err
    assert results_md.read_text() == "# kept as it was\n"  # no failed section lands there
    assert "fake/fail run 1 failed: exited with code 1" in err
    assert "boom 29" in err and "boom 10" in err and "boom 9\n" not in err  # last 20 lines
    assert "fake/silent run 1 failed: exited 0 but reported no result" in err
    data = json.loads((tmp_path / "out" / "fake.json").read_text())
    by_system = {r["system"]: r for r in data["records"]}
    assert by_system["a"]["error"] is None  # the others' results are kept
    assert by_system["fail"]["returncode"] == 1
    assert by_system["fail"]["output_tail"][-1] == "boom 29"


def _assert_gone(pids_file: Path) -> None:
    child, grandchild = map(int, pids_file.read_text().split())
    for pid in (child, grandchild):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"


def test_timeout_kills_the_whole_tree(cases_dir: Path) -> None:
    command = [sys.executable, str(cases_dir / "fake.py"), "--system", "hang"]
    start = time.perf_counter()
    measured = run_measured(command, timeout_s=1.0)
    assert time.perf_counter() - start < 10
    assert measured.timed_out and not measured.ok
    assert "timed out" in (measured.failure() or "")
    _assert_gone(cases_dir.parent / "pids.txt")  # the grandchild had left the session


def test_ctrl_c_kills_the_whole_tree(cases_dir: Path) -> None:
    pids_file = cases_dir.parent / "pids.txt"

    def interrupt_once_started() -> None:
        deadline = time.monotonic() + 10
        while not pids_file.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_started, daemon=True).start()
    command = [sys.executable, str(cases_dir / "fake.py"), "--system", "hang"]
    with pytest.raises(KeyboardInterrupt):
        run_measured(command, timeout_s=30)
    _assert_gone(pids_file)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "run", "nope"], "unknown benchmark case 'nope'"),
        (["bench", "run", "fake", "--systems", "a,zzz"], "unknown system(s) zzz"),
        (["bench", "run", "fake", "--reps", "0"], "--reps must be at least 1"),
        (["bench", "run"], "the following arguments are required: CASE"),
        (["bench"], "needs an action"),
        (["bench", "run", "fake", "--timeout", "0"], "--timeout must be positive"),
        (["bench", "run", "fake", "--out", __file__], "is a file, not a folder"),
        (["bench", "run", "fake", "--results-md", "/"], "not a file in an existing folder"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    cases_dir: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    if len(argv) > 2:
        argv = [*argv, "--cases-dir", str(cases_dir)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_cases_dir_says_where_to_run_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "list", "--cases-dir", str(tmp_path / "nowhere")]) == 2
    assert "run from an rlsys checkout or pass --cases-dir" in capsys.readouterr().err
    assert main(["bench", "list", "--cases-dir", str(tmp_path)]) == 2
    assert "no benchmark cases in" in capsys.readouterr().err
    with pytest.raises(UsageError, match="unknown benchmark case"):
        load_case(tmp_path, "nope")


def _record(system: str, rate: float, rss_mib: float, ok: bool = True, **metrics) -> Record:
    return Record(
        system=system, rep=0, order=0, returncode=0 if ok else 1, wall_s=rate / 100,
        peak_rss_bytes=int(rss_mib * MIB), env_steps=rate, seconds=1.0, rate=rate,
        metrics=metrics, error=None if ok else "exited with code 1",
    )  # fmt: skip


def test_summary_takes_medians_and_ratios_to_the_baseline() -> None:
    records = [
        _record("base", 100, 10, compile_seconds=1.0),
        _record("base", 300, 30, compile_seconds=3.0),
        _record("base", 200, 20, compile_seconds=2.0),
        _record("fast", 600, 40),
        _record("fast", 900, 80),
        _record("fast", 1e9, 1e6, ok=False),  # failed runs add no numbers
        _record("fast", 400, 60),
    ]
    base, fast, gone = summarize(records, ["base", "fast", "gone"], "base", {"gone": "absent"})
    assert (base.runs, base.failed, base.rate, base.peak_rss_mib) == (3, 0, 200, 20)
    assert base.wall_s == 2.0 and base.metrics == {"compile_seconds": 2.0}
    assert (base.rate_ratio, base.rss_ratio) == (1.0, 1.0)
    assert (fast.runs, fast.failed, fast.rate, fast.peak_rss_mib) == (3, 1, 600, 60)
    assert (fast.rate_ratio, fast.rss_ratio) == (3.0, 3.0)
    assert fast.metrics == {}
    assert gone.skipped == "absent" and gone.rate is None and gone.rate_ratio is None


def test_summary_without_a_baseline_run_has_no_ratios() -> None:
    (only,) = summarize([_record("x", 10, 1)], ["x"], "base")
    assert only.rate == 10 and only.rate_ratio is None and only.rss_ratio is None


def test_section_replacement_keeps_the_rest_of_the_file() -> None:
    begin, end = markers("fake")
    other_begin, other_end = markers("other")
    text = (
        "# Benchmark results\n\nIntro written by hand.\n\n"
        f"{begin}\nold fake table\n{end}\n\nBetween.\n\n"
        f"{other_begin}\nother table\n{other_end}\n\nOutro.\n"
    )
    updated = replace_section(text, "fake", "## fake\n\nnew table\n")
    assert updated == text.replace("old fake table", "## fake\n\nnew table")
    assert replace_section(updated, "fake", "## fake\n\nnew table\n") == updated  # idempotent

    appended = replace_section(text, "third", "three\n")
    assert appended.startswith(text.rstrip("\n"))
    assert appended.endswith(f"\n\n{markers('third')[0]}\nthree\n{markers('third')[1]}\n")
    assert replace_section("", "fake", "x").startswith("# Benchmark results\n\n" + begin)

    with pytest.raises(UsageError, match="broken or repeated"):
        replace_section(f"{begin}\nno end\n", "fake", "x")
    with pytest.raises(UsageError, match="broken or repeated"):
        replace_section(f"{begin}\n{end}\n{begin}\n{end}\n", "fake", "x")


def test_list_shows_cases_systems_and_why_some_are_skipped(
    cases_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "list", "--cases-dir", str(cases_dir)]) == 0
    out = capsys.readouterr().out
    assert "fake" in out and "A fake case for the harness tests." in out
    assert "ghost (skipped: ghost extra not installed)" in out


def test_broken_results_file_is_refused_before_anything_runs(
    cases_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results_md = tmp_path / "RESULTS.md"
    results_md.write_text(f"{markers('fake')[0]}\nno end marker\n")
    argv = ["bench", "run", "fake", "--systems", "a", "--cases-dir", str(cases_dir)]
    assert main([*argv, "--results-md", str(results_md), "--out", str(tmp_path / "out")]) == 2
    assert "broken or repeated" in capsys.readouterr().err
    assert not (cases_dir.parent / "order.log").exists()  # no child was started


def test_the_results_file_holds_each_case_section_once_so_a_run_can_replace_it():
    # A section pasted in with its own markers repeats them, and the next
    # `--results-md benchmarks/RESULTS.md` would refuse the file.
    benchmarks = Path(__file__).resolve().parents[1] / "benchmarks"
    text = (benchmarks / "RESULTS.md").read_text()
    for name in case_names(benchmarks / "cases"):
        begin, end = markers(name)
        assert text.count(begin) == text.count(end) <= 1, name
        replace_section(text, name, "a new table")  # raises on broken markers
