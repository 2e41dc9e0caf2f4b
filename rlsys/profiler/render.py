"""Render profile summaries (`rlsys.profiler.summary`): console tables and a stacked-bar plot.

Everything reads the JSON-ready summary dict, so `rlsys profile` and `rlsys report` print the
same thing. rich and matplotlib are imported inside the functions that use them.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

CATEGORY_COLORS = {
    "python": "#4c72b0",
    "simulator": "#55a868",
    "backend": "#c44e52",
    "cuda_api": "#8172b2",
    "compile": "#ccb974",
    "comm": "#64b5cd",
    "wait": "#b0b0b0",
    "overhead": "#8c613c",
}


def console(stderr: bool = False) -> Any:
    """A rich console; wide when not a terminal, so that logs keep tables whole.

    Output into a closed pipe (`rlsys report DIR | head -1`) is dropped, as other Unix tools
    do, and the command goes on to write its files and exit with its own code: rich's
    default ends the process with exit code 1 there.
    """
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich >= 13.8 calls it on BrokenPipeError
            self.quiet = True
            _drop_stdout()

    out = _Console(stderr=stderr)
    if not out.is_terminal:
        out = _Console(stderr=stderr, width=160)
    return out


def _drop_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so that no later write (nor the flush at exit)
    meets the closed pipe again (the recipe of Python's signal module documentation)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _used_categories(summaries: list[dict[str, Any]]) -> list[str]:
    """CPU categories with any time in any of `summaries`, in their canonical order."""
    names: list[str] = []
    for summary in summaries:
        for name, seconds in summary["total"]["categories"].items():
            if seconds > 0 and name not in names:
                names.append(name)
    order = list(CATEGORY_COLORS)
    return sorted(names, key=lambda n: order.index(n) if n in order else len(order))


def status_line(summary: dict[str, Any]) -> str:
    """ "complete" or "PARTIAL (why)", plus the exit code when it is not 0."""
    if summary["complete"]:
        text = "complete"
    else:
        reasons = []
        if summary.get("stopped_by") == "max-seconds":
            reasons.append("stopped at --max-seconds")
        elif summary.get("stopped_by") == "interrupt":
            reasons.append("interrupted")
        if not summary.get("trace_complete", True):
            reasons.append("a process did not close its trace")
        text = f"PARTIAL profile ({', '.join(reasons) or 'incomplete'})"
    code = summary.get("exit_code")
    if code not in (0, None):
        text += f"; the command exited with code {code}"
    return text


def _seconds(value: float) -> str:
    return f"{value:.3f}"


NAME_WIDTH = 48
"""The most characters of an operation name a terminal table shows: rich gives a longer name
the width of the number columns, which shrank to nothing (a column that does not wrap is
never shrunk). Full names stay in summary.json and report.html."""
PLOT_NAME_WIDTH = 24  # characters of an operation name under its bar
NUMBER_WIDTH = 10  # a number column: "100.0" or "12.345" and the padding and border


def name_width(screen_width: int | None, numbers: int) -> int:
    """How many characters of an operation name fit beside `numbers` number columns."""
    if screen_width is None:
        return NAME_WIDTH
    return max(16, min(NAME_WIDTH, screen_width - 4 - NUMBER_WIDTH * numbers))


def short_name(name: str, width: int = NAME_WIDTH) -> str:
    """`name`, cut to `width` characters with an ellipsis."""
    return name if len(name) <= width else name[: width - 1] + "\u2026"


def summary_table(summary: dict[str, Any], title: str | None = None,
                  screen_width: int | None = None) -> Any:  # fmt: skip
    """operation x (calls, seconds, % of total, seconds per CPU category, GPU seconds); names
    cut to fit `screen_width` beside the numbers."""
    from rich.markup import escape
    from rich.table import Table

    categories = _used_categories([summary])
    show_gpu = summary["total"]["gpu_seconds"] > 0
    title = title or f"rlsys profile: {shlex.join(summary['command'])}"
    caption = (
        f"{status_line(summary)}; {summary['traced_seconds']:.3f} s traced (first to last "
        f"recorded event) of the command's {summary['wall_seconds']:.3f} s wall time"
    )
    table = Table(title=escape(title), caption=escape(caption), caption_justify="left")
    table.add_column("operation", no_wrap=True)
    for header in ["calls", "seconds", "% of total", *(f"{c} s" for c in categories)]:
        table.add_column(header, justify="right")
    if show_gpu:
        table.add_column("GPU s", justify="right")
    rows = [*summary["operations"].items(), ("total", summary["total"])]
    width = name_width(screen_width, len(table.columns) - 1)
    for i, (name, times) in enumerate(rows):
        cells = [
            escape(short_name(name, width)),
            str(times["calls"]),
            _seconds(times["seconds"]),
            f"{times['percent']:.1f}",
            *(_seconds(times["categories"][c]) for c in categories),
        ]
        if show_gpu:
            cells.append(_seconds(times["gpu_seconds"]))
        last = i == len(rows) - 1
        table.add_row(*cells, end_section=i == len(rows) - 2, style="bold" if last else None)
    return table


def processes_table(summary: dict[str, Any]) -> Any:
    """One row per process (only worth printing when there are several)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table("pid", "parent", "command", "traced s", "busiest operations",
                  title="processes")  # fmt: skip
    for process in summary["processes"]:
        ops = sorted(process["operations"].items(), key=lambda kv: -kv[1]["seconds"])
        top = ", ".join(f"{short_name(name)} {t['percent']:.0f}%" for name, t in ops[:3])
        table.add_row(
            str(process["pid"]),
            str(process["parent_pid"]),
            escape(process["command"] or ""),
            _seconds(process["traced_seconds"]),
            escape(top),
        )
    return table


def comparison_table(left: dict[str, Any], right: dict[str, Any], names: tuple[str, str],
                     screen_width: int | None = None) -> Any:  # fmt: skip
    """Per-operation seconds of two profiles side by side, with the ratio right / left; names
    cut to fit `screen_width` beside the numbers."""
    from rich.markup import escape
    from rich.table import Table

    a, b = names
    caption = f"{a}: {status_line(left)}\n{b}: {status_line(right)}"
    table = Table(title="rlsys report: per-operation seconds", caption=escape(caption),
                  caption_justify="left")  # fmt: skip
    table.add_column("operation", no_wrap=True)
    for header in (f"{a} s", f"{a} %", f"{b} s", f"{b} %", f"{b} / {a}"):
        table.add_column(escape(header), justify="right")
    operations = list(dict.fromkeys([*left["operations"], *right["operations"]]))
    rows = [(n, left["operations"].get(n), right["operations"].get(n)) for n in operations]
    rows.append(("total", left["total"], right["total"]))
    width = name_width(screen_width, 5)
    for i, (name, x, y) in enumerate(rows):
        table.add_row(
            escape(short_name(name, width)),
            _seconds(x["seconds"]) if x else "-",
            f"{x['percent']:.1f}" if x else "-",
            _seconds(y["seconds"]) if y else "-",
            f"{y['percent']:.1f}" if y else "-",
            _ratio(x, y),
            end_section=i == len(rows) - 2,
            style="bold" if i == len(rows) - 1 else None,
        )
    return table


def _ratio(x: dict[str, Any] | None, y: dict[str, Any] | None) -> str:
    if not x or not y or x["seconds"] <= 0:
        return "-"
    return f"{y['seconds'] / x['seconds']:.2f}x"


def plot_breakdown(summary: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """A stacked bar per operation: its thread seconds split by CPU category (PNG, Agg)."""
    from rlsys.profiler.plots import save_and_close

    path = Path(path)
    save_and_close(breakdown_figure(summary), path)
    return path


def breakdown_figure(summary: dict[str, Any]) -> Any:
    """The figure of `plot_breakdown`; the caller saves and closes it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    operations = list(summary["operations"].items())
    categories = _used_categories([summary]) or ["python"]
    figure, axes = plt.subplots(figsize=(max(4.0, 1.3 * len(operations) + 2.5), 4.0))
    places = list(range(len(operations)))  # by place: two names cut alike stay two bars
    bottom = [0.0] * len(operations)
    for category in categories:
        heights = [times["categories"].get(category, 0.0) for _, times in operations]
        axes.bar(places, heights, bottom=bottom, label=category,
                 color=CATEGORY_COLORS.get(category))  # fmt: skip
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    axes.set_ylabel("thread seconds")
    status = "" if summary["complete"] else " (partial)"
    axes.set_title(f"time per operation by category{status}", fontsize=10)
    axes.legend(fontsize=8)
    # Names cut as in the tables: a long one left no room for the bars (tight_layout warned)
    axes.set_xticks(places, [short_name(name, PLOT_NAME_WIDTH) for name, _ in operations])
    axes.tick_params(axis="x", labelrotation=20, labelsize=8)
    figure.tight_layout()
    return figure


def print_summary(screen: Any, summary: dict[str, Any]) -> None:
    """The operation table, the process table when there are several, and the note."""
    screen.print(summary_table(summary, screen_width=screen.width))
    if len(summary["processes"]) > 1:
        screen.print(processes_table(summary))
    line = totals_line(summary)
    if line:
        screen.print(line, markup=False, highlight=False)
    screen.print(summary["note"], style="dim", markup=False, highlight=False)


def totals_line(summary: dict[str, Any]) -> str | None:
    """Uncorrected, corrected and uninstrumented totals and the bias (with a calibration)."""
    totals = summary.get("totals") or {}
    if totals.get("corrected_seconds") is None:
        return None
    return (
        f"totals: uncorrected {totals['uncorrected_seconds']:.3f} s "
        f"(x{totals['inflation']:.2f} the uninstrumented), corrected "
        f"{totals['corrected_seconds']:.3f} s, uninstrumented "
        f"{totals['uninstrumented_seconds']:.3f} s, bias {100 * totals['bias']:+.1f}%"
    )
