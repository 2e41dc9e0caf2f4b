"""Medians, ratios against the baseline, and their markdown.

Medians, not means: one run disturbed by the machine (a cron job, a page-cache miss) moves
a mean but not a median of five. Ratios are taken between medians, each system against the
case's baseline, so a reader sees "3.1x the steps/s at 1.4x the memory" without arithmetic.

`replace_section` rewrites only this case's part of a shared results file (between
`<!-- rlsys-bench:CASE:begin -->` and `<!-- rlsys-bench:CASE:end -->`), so cases can be
re-run one at a time and hand-written text around them survives.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rlsys.bench.runner import CaseRun, Record
from rlsys.errors import UsageError

MIB = 1024 * 1024
RESULTS_HEADER = "# Benchmark results\n"


@dataclass
class Summary:
    """The medians of one system's successful runs, and its ratios to the baseline."""

    system: str
    runs: int
    failed: int
    wall_s: float | None = None
    rate: float | None = None
    peak_rss_mib: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    rate_ratio: float | None = None
    rss_ratio: float | None = None
    skipped: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarize(
    records: Sequence[Record],
    systems: Sequence[str],
    baseline: str,
    skipped: dict[str, str] | None = None,
) -> list[Summary]:
    """One `Summary` per system, in `systems` order; failed runs count but add no numbers."""
    skipped = skipped or {}
    rows = []
    for name in systems:
        mine = [r for r in records if r.system == name]
        ok = [r for r in mine if r.ok]
        rss = _median([r.peak_rss_bytes for r in ok])
        rows.append(
            Summary(
                system=name,
                runs=len(ok),
                failed=len(mine) - len(ok),
                wall_s=_median([r.wall_s for r in ok]),
                rate=_median([r.rate for r in ok]),
                peak_rss_mib=None if rss is None else rss / MIB,
                metrics=_metric_medians(ok),
                skipped=skipped.get(name),
            )
        )
    base = next((row for row in rows if row.system == baseline), None)
    if base is not None:  # without a baseline run there is nothing to compare with
        for row in rows:
            row.rate_ratio = _ratio(row.rate, base.rate)
            row.rss_ratio = _ratio(row.peak_rss_mib, base.peak_rss_mib)
    return rows


def _metric_medians(records: Sequence[Record]) -> dict[str, float]:
    names = dict.fromkeys(k for r in records for k in r.metrics)  # first-seen order
    return {k: statistics.median(r.metrics[k] for r in records if k in r.metrics) for k in names}


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or not base:
        return None
    return value / base


def fmt_rate(value: float | None) -> str:
    if value is None:
        return "—"
    for scale, suffix in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{suffix}"
    return f"{value:.1f}"


def fmt_number(value: float | None) -> str:
    if value is None:
        return "—"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.3g}" if abs(value) >= 10 else f"{value:.2f}"
    return f"{value:.3g}"


def fmt_ratio(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 10:
        return f"{value:.1f}×"
    return f"{value:.2f}×" if value >= 0.1 else f"{value:.2g}×"


def table_rows(run: CaseRun, rows: Sequence[Summary]) -> tuple[list[str], list[list[str]]]:
    """Header and cells shared by the markdown and the console table."""
    case = run.case
    metric_names = list(dict.fromkeys(k for row in rows for k in row.metrics))
    header = ["system", "runs", "wall s", f"{case.unit}/s", "peak RSS MiB", *metric_names]
    header += [f"speed vs {case.baseline}", f"RSS vs {case.baseline}"]
    cells = []
    for row in rows:
        if row.skipped is not None:
            cells.append([row.system, f"skipped: {row.skipped}"] + [""] * (len(header) - 2))
            continue
        runs = f"{row.runs}" if not row.failed else f"{row.runs} ({row.failed} failed)"
        cells.append(
            [row.system, runs, fmt_number(row.wall_s), fmt_rate(row.rate),
             fmt_number(row.peak_rss_mib)]
            + [fmt_number(row.metrics.get(k)) for k in metric_names]
            + [fmt_ratio(row.rate_ratio), fmt_ratio(row.rss_ratio)]
        )  # fmt: skip
    return header, cells


def case_table(run: CaseRun, rows: Sequence[Summary]) -> str | None:
    """The case's own markdown table (`Case.summary_table`), if it has one."""
    make = run.case.summary_table
    return None if make is None else make(rows).rstrip("\n")


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table: the first column left-aligned, the others right (numbers)."""
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown(run: CaseRun, rows: Sequence[Summary], *, command: str, machine: dict) -> str:
    """This case's section of a results file (without the markers)."""
    header, cells = table_rows(run, rows)
    case = run.case
    lines = [f"## {case.name}", "", case.description, "", markdown_table(header, cells)]
    extra = case_table(run, rows)
    if extra:
        lines += ["", extra]
    versions = ", ".join(f"{k} {v}" for k, v in machine.get("versions", {}).items() if v)
    quick = " (`--quick`: smaller workloads)" if run.quick else ""
    lines += [
        "",
        f"Medians over {run.reps} run(s) per system{quick}, systems alternating (the order "
        "reversed every repetition), each run a fresh process. *wall s*: the whole process "
        "(imports, compilation, work). "
        f"*{case.unit}/s*: work over the region the system timed itself. *peak RSS*: the "
        "process and all its descendants, summed. Ratios are against the baseline, "
        f"`{case.baseline}`.",
        "",
        f"Machine: {machine.get('cpu_model') or 'unknown CPU'}, {machine.get('cpu_count')} "
        f"CPUs, Python {machine.get('python')}; {versions}; {machine.get('date')}.",
        "",
        f"Command: `{command}`",
    ]
    return "\n".join(lines) + "\n"


def markers(case_name: str) -> tuple[str, str]:
    return f"<!-- rlsys-bench:{case_name}:begin -->", f"<!-- rlsys-bench:{case_name}:end -->"


def replace_section(text: str, case_name: str, section: str) -> str:
    """`text` with this case's section replaced, or appended if it had none."""
    begin, end = markers(case_name)
    block = f"{begin}\n{section.rstrip()}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    found = len(pattern.findall(text))
    if found > 1 or (found == 0 and (begin in text or end in text)):
        raise UsageError(
            f"the markers of case {case_name!r} are broken or repeated in the results file",
            hint=f"keep exactly one `{begin}` ... `{end}` pair, or delete both",
        )
    if found == 1:
        return pattern.sub(lambda _: block, text, count=1)
    if not text.strip():
        text = RESULTS_HEADER
    return text.rstrip("\n") + "\n\n" + block + "\n"


def update_results_file(path: Path, case_name: str, section: str) -> None:
    text = path.read_text() if path.exists() else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(replace_section(text, case_name, section))
