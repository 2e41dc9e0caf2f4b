"""report.html and compare.html render in headless Chromium with no console messages.

Chromium (`--enable-logging=stderr`) logs every console message of the page, errors included,
as a line with "CONSOLE"; the pages have no script, so any such line is an error, e.g. the
Content-Security-Policy blocking a load. The first test shows that this capture sees them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from profile_fixtures import SIMULATION_HEAVY, gpu_summary, make_summary

from rlsys.profiler.report_html import CSP, render_comparison, render_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="needs headless Chromium (apt-get install -y chromium)"
    ),
]


def render(page: str, tmp_path: Path) -> tuple[str, list[str]]:
    """Load `page` from a file in headless Chromium: (the DOM after load, console lines)."""
    path = tmp_path / "page.html"
    path.write_text(page, encoding="utf-8")
    command = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr",
        "--v=0", "--dump-dom", path.as_uri(),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return done.stdout, console


def test_the_capture_sees_console_errors_and_blocked_loads(tmp_path: Path) -> None:
    page = (f'<html><head><meta http-equiv="Content-Security-Policy" content="{CSP}"></head>'
            '<body><img src="https://example.com/a.png"></body></html>')  # fmt: skip
    _, console = render(page, tmp_path)
    assert len(console) == 1 and "Content Security Policy" in console[0]


def test_the_report_renders_without_console_messages(tmp_path: Path) -> None:
    summary = make_summary(SIMULATION_HEAVY, stopped_by="interrupt")
    dom, console = render(render_report(summary), tmp_path)
    assert console == []
    assert "78% of the run is simulation" in dom
    assert "<td>simulation</td>" in dom and "PARTIAL profile (interrupted)" in dom


def test_the_comparison_renders_without_console_messages(tmp_path: Path) -> None:
    before = make_summary(SIMULATION_HEAVY)
    after = make_summary([("simulation", 0.0, 0.4, None)])
    dom, console = render(render_comparison(before, after, ("base", "new")), tmp_path)
    assert console == []
    assert "2.50x faster" in dom and dom.count("<img") == 2


def test_the_gpu_section_renders_without_console_messages(tmp_path: Path) -> None:
    dom, console = render(render_report(gpu_summary()), tmp_path)
    assert console == []
    assert "GPU: true busy time vs polled utilization" in dom and dom.count("<img") == 2
