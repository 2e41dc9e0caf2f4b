"""report.html and compare.html as text: self-contained, with table rows, verdict and plot."""

from __future__ import annotations

import base64
import io
import re
import sys
import textwrap
from pathlib import Path

import matplotlib.image
from profile_fixtures import SIMULATION_HEAVY, make_summary

from rlsys.cli import main
from rlsys.profiler.report_html import render_comparison, render_report


def external_urls(page: str) -> list[str]:
    """URLs and references the page would load: anything but an inline data URI."""
    text = re.sub(r'"data:[^"]*"', '"data:"', page)
    return re.findall(r"https?://\S+|(?:src|href|url)\s*[=(]\s*(?![\"']?data:)[^\s>]+", text)


def embedded_pngs(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([^"]+)"', page)]


def test_external_urls_finds_loads() -> None:
    for page in ('<img src="x.png">', "<a href='https://a.b/c'>", "url(//cdn.x/f.woff)",
                 '<link href="style.css">'):  # fmt: skip
        assert external_urls(page), page
    assert external_urls('<img src="data:image/png;base64,a//b">') == []


def test_the_page_is_self_contained_with_rows_verdict_and_plot() -> None:
    page = render_report(make_summary(SIMULATION_HEAVY))
    assert external_urls(page) == []
    assert "<script" not in page and "default-src 'none'" in page
    for row in ("<td>simulation</td><td>1</td><td>0.780</td>", "<td>inference</td>",
                "<td>backpropagation</td>", "<td>total</td><td>3</td><td>1.000</td>"):  # fmt: skip
        assert row in page
    assert "simulator s" in page and "backend s" in page
    assert "78% of the run is simulation" in page and "add actors" in page
    (png,) = embedded_pngs(page)
    image = matplotlib.image.imread(io.BytesIO(png), format="png")
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert 'class="banner complete"' in page


def test_names_from_the_program_are_escaped() -> None:
    page = render_report(make_summary([("<b>step</b> & co", 0.0, 1.0, None)]))
    assert "&lt;b&gt;step&lt;/b&gt; &amp; co" in page and "<b>step" not in page


def test_a_partial_profile_has_a_banner() -> None:
    page = render_report(make_summary(SIMULATION_HEAVY, stopped_by="max-seconds"))
    assert 'class="banner partial"' in page
    assert "PARTIAL profile (stopped at --max-seconds)" in page
    assert "<title>rlsys profile (partial)</title>" in page


def test_the_comparison_page_shows_both_runs_and_the_ratio() -> None:
    before = make_summary(SIMULATION_HEAVY)
    after = make_summary([("simulation", 0.0, 0.39, None), ("inference", 0.39, 0.5, None)])
    page = render_comparison(before, after, ("base", "new"))
    assert external_urls(page) == []
    assert "<td>simulation</td><td>0.780</td><td>78.0</td><td>0.390</td><td>78.0</td>" in page
    assert "<td>0.50x</td>" in page  # simulation: 0.39 / 0.78
    assert "<td>backpropagation</td><td>0.100</td><td>10.0</td><td>-</td>" in page
    assert "2.00x faster" in page
    assert len(embedded_pngs(page)) == 2


SCRIPT = """
    import rlsys
    for _ in range(20):
        with rlsys.operation("simulation"):
            sum(range(20000))
    with rlsys.operation("backpropagation"):
        sum(range(1000))
"""


def test_profile_and_report_write_the_pages(tmp_path: Path, capsys) -> None:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        assert main(["profile", "--quiet", "--out", str(out), "--", sys.executable,
                     str(script)]) == 0  # fmt: skip
    page = (first / "report.html").read_text()
    assert "<td>simulation</td><td>20</td>" in page and "% of the run is simulation" in page
    (first / "report.html").unlink()
    assert main(["report", "--quiet", str(first)]) == 0
    assert (first / "report.html").read_text() == page  # re-rendered from summary.json alone
    assert main(["report", "--quiet", str(first), str(second)]) == 0
    compare = (second / "compare.html").read_text()
    assert f"{first} vs {second}" in compare
