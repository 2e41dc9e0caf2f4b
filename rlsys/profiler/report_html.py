"""`report.html` and `compare.html`: one self-contained page per profile, or per comparison.

Self-contained means the page loads nothing: CSS is inline, plots are PNG data URIs, there is
no script, and a Content-Security-Policy (`default-src 'none'`) makes the browser refuse any
external load, so a page that tried one would show it as a console error (the browser test
checks for those). Everything reads the JSON-ready summary dict (`rlsys.profiler.summary`),
so `rlsys report DIR` re-renders the page from summary.json alone.
"""

from __future__ import annotations

import os
import shlex
from html import escape
from pathlib import Path
from typing import Any

from rlsys.profiler.atomic import write_text
from rlsys.profiler.plots import gpu_figure, png_data_uri
from rlsys.profiler.render import _used_categories, breakdown_figure, status_line
from rlsys.profiler.verdict import comparison_verdict, verdict

REPORT_FILE = "report.html"
COMPARE_FILE = "compare.html"

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
code { background: #f3f3f3; padding: 0 .25em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { padding: .2em .6em; border-bottom: 1px solid #ddd; text-align: right; }
th:first-child, td:first-child { text-align: left; }
tr.total td { font-weight: bold; border-top: 2px solid #888; }
.share { display: inline-block; height: .7em; background: #4c72b0; margin-left: .3em; }
.banner { padding: .6em 1em; margin: 1em 0; border-radius: 4px; font-weight: bold; }
.partial { background: #fde2e1; border: 1px solid #c44e52; color: #8a1f23; }
.complete { background: #e3f1e6; border: 1px solid #55a868; }
.verdict { font-size: 1.1em; background: #f5f5fa; padding: .6em 1em; border-left: 4px solid
  #4c72b0; }
.runs { display: flex; gap: 2em; flex-wrap: wrap; } .runs > div { flex: 1; min-width: 30em; }
img { max-width: 100%; }
.note { color: #666; font-size: .9em; }
"""


def _page(title: str, body: list[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            f"<title>{escape(title)}</title>",
            f"<style>{STYLE}</style>",
            "</head><body>",
            *body,
            "</body></html>",
            "",
        ]
    )


def _status_banner(summary: dict[str, Any]) -> str:
    kind = "complete" if summary["complete"] else "partial"
    return f'<div class="banner {kind}">{escape(status_line(summary))}</div>'


def _verdict_block(sentences: list[str]) -> str:
    items = "".join(f"<p>{escape(s)}</p>" for s in sentences)
    return f'<div class="verdict"><strong>Where the time goes.</strong> {items}</div>'


def _cell(value: float) -> str:
    return f"<td>{value:.3f}</td>"


def operations_table(summary: dict[str, Any]) -> str:
    """operation x (calls, seconds, % of total with a bar, seconds per category, GPU s)."""
    categories = _used_categories([summary])
    show_gpu = summary["total"].get("gpu_seconds", 0.0) > 0
    headers = ["operation", "calls", "seconds", "% of total", *(f"{c} s" for c in categories)]
    if show_gpu:
        headers.append("GPU s")
    rows = [f"<tr>{''.join(f'<th>{escape(h)}</th>' for h in headers)}</tr>"]
    entries = [*summary["operations"].items(), ("total", summary["total"])]
    for i, (name, times) in enumerate(entries):
        percent = times["percent"]
        bar = f'<span class="share" style="width:{percent:.1f}px"></span>'
        cells = [
            f"<td>{escape(name)}</td>",
            f"<td>{times['calls']}</td>",
            _cell(times["seconds"]),
            f"<td>{percent:.1f}{bar}</td>",
            *(_cell(times["categories"].get(c, 0.0)) for c in categories),
        ]
        if show_gpu:
            cells.append(_cell(times.get("gpu_seconds", 0.0)))
        css = ' class="total"' if i == len(entries) - 1 else ""
        rows.append(f"<tr{css}>{''.join(cells)}</tr>")
    return "<table>\n" + "\n".join(rows) + "\n</table>"


def _image(uri: str, alt: str) -> str:
    return f'<img src="{uri}" alt="{escape(alt)}">'


def _run_section(summary: dict[str, Any]) -> list[str]:
    """Banner, verdict, table, plot and note of one profile."""
    command = shlex.join(summary["command"])
    traced = (
        f"{summary['traced_seconds']:.3f} s traced of the command's "
        f"{summary['wall_seconds']:.3f} s wall time"
    )
    return [
        f"<p>Command: <code>{escape(command)}</code><br>{escape(traced)}</p>",
        _status_banner(summary),
        _verdict_block(verdict(summary)),
        "<h2>Per operation</h2>",
        operations_table(summary),
        _image(png_data_uri(breakdown_figure(summary)), "time per operation by category"),
        *_gpu_section(summary),
        f'<p class="note">{escape(summary["note"])}</p>',
    ]


def _gpu_section(summary: dict[str, Any]) -> list[str]:
    """Busy vs polled per device, and its plot, when the run had a GPU (summary "gpu")."""
    section = summary.get("gpu")
    if not section:
        return []
    headers = ["device", "span s", "busy s", "busy %", "polled % (NVML)", "samples"]
    rows = [f"<tr>{''.join(f'<th>{escape(h)}</th>' for h in headers)}</tr>"]
    for row in section["devices"]:
        polled = row["polled_percent"]
        cells = [escape(row["device"]), f"{row['span_seconds']:.3f}", f"{row['busy_seconds']:.3f}",
                 f"{row['busy_percent']:.1f}", "-" if polled is None else f"{polled:.1f}",
                 str(row["samples"])]  # fmt: skip
        rows.append(f"<tr>{''.join(f'<td>{c}</td>' for c in cells)}</tr>")
    return [
        "<h2>GPU: true busy time vs polled utilization</h2>",
        "<table>\n" + "\n".join(rows) + "\n</table>",
        _image(png_data_uri(gpu_figure(section)), "GPU busy vs polled utilization"),
        f'<p class="note">{escape(section["method"])}</p>',
    ]


def render_report(summary: dict[str, Any]) -> str:
    """The HTML page of one profile."""
    title = "rlsys profile" + ("" if summary["complete"] else " (partial)")
    return _page(title, [f"<h1>{escape(title)}</h1>", *_run_section(summary)])


def comparison_table(left: dict[str, Any], right: dict[str, Any], names: tuple[str, str]) -> str:
    """Per-operation seconds and % of both runs, and the ratio second / first."""
    a, b = names
    headers = ["operation", f"{a} s", f"{a} %", f"{b} s", f"{b} %", f"{b} / {a}"]
    rows = [f"<tr>{''.join(f'<th>{escape(h)}</th>' for h in headers)}</tr>"]
    operations = list(dict.fromkeys([*left["operations"], *right["operations"]]))
    entries = [(n, left["operations"].get(n), right["operations"].get(n)) for n in operations]
    entries.append(("total", left["total"], right["total"]))
    for i, (name, x, y) in enumerate(entries):
        cells = [f"<td>{escape(name)}</td>"]
        for times in (x, y):
            if times:
                cells += [_cell(times["seconds"]), f"<td>{times['percent']:.1f}</td>"]
            else:
                cells += ["<td>-</td>", "<td>-</td>"]
        ratio = f"{y['seconds'] / x['seconds']:.2f}x" if x and y and x["seconds"] > 0 else "-"
        cells.append(f"<td>{ratio}</td>")
        css = ' class="total"' if i == len(entries) - 1 else ""
        rows.append(f"<tr{css}>{''.join(cells)}</tr>")
    return "<table>\n" + "\n".join(rows) + "\n</table>"


def render_comparison(left: dict[str, Any], right: dict[str, Any], names: tuple[str, str]) -> str:
    """The HTML page comparing two profiles: the comparison table, then both runs side by side."""
    title = f"rlsys report: {names[0]} vs {names[1]}"
    columns = [
        f"<div><h2>{escape(name)}</h2>{''.join(_run_section(summary))}</div>"
        for name, summary in zip(names, (left, right), strict=True)
    ]
    body = [
        f"<h1>{escape(title)}</h1>",
        _verdict_block(comparison_verdict(left, right, names)),
        "<h2>Per operation, side by side</h2>",
        comparison_table(left, right, names),
        f'<div class="runs">{"".join(columns)}</div>',
    ]
    return _page(title, body)


def write_report(summary: dict[str, Any], directory: str | os.PathLike[str]) -> Path:
    path = Path(directory) / REPORT_FILE
    return write_text(path, render_report(summary))


def write_comparison(
    left: dict[str, Any],
    right: dict[str, Any],
    names: tuple[str, str],
    directory: str | os.PathLike[str],
) -> Path:
    path = Path(directory) / COMPARE_FILE
    return write_text(path, render_comparison(left, right, names))
