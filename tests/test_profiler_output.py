"""What `rlsys profile` and `rlsys report` print: a closed pipe, long operation names."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

from profile_fixtures import SIMULATION_HEAVY, make_summary
from rich.console import Console

from rlsys.profiler.render import breakdown_figure, comparison_table, print_summary
from rlsys.profiler.summary import write_summary
from rlsys.trace import Category


def run_into_closed_pipe(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`rlsys ARGV | head -0`: stdout is a pipe whose reader has already gone."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "rlsys.cli", *argv], stdout=write,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                              cwd=cwd, timeout=120)  # fmt: skip
    finally:
        os.close(write)


def test_report_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """rich ended the process with exit code 1 (`rlsys report DIR | head -1`)."""
    write_summary(make_summary(SIMULATION_HEAVY), tmp_path)
    done = run_into_closed_pipe(["report", str(tmp_path)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Error" not in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / "report.html").is_file()  # the files are still written


def test_profile_into_a_closed_pipe_keeps_the_commands_exit_code(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text("import sys\nsys.exit(3)\n")
    done = run_into_closed_pipe(["profile", "--out", "p", "--", str(script)], tmp_path)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and (tmp_path / "p" / "summary.json").is_file()


def test_a_long_operation_name_is_cut_and_the_numbers_keep_their_width() -> None:
    """A 300-character name took the number columns' width: they showed as `0.…` or not at
    all. The terminal shows its start and an ellipsis; summary.json keeps it whole."""
    long = "step-" + "x" * 294 + "!"
    summary = make_summary([(long, 0.0, 0.78, Category.SIMULATOR),
                            ("inference", 0.78, 1.0, Category.BACKEND)])  # fmt: skip
    for width in (80, 160):
        screen = Console(file=io.StringIO(), width=width)
        print_summary(screen, summary)
        row = next(line for line in screen.file.getvalue().splitlines() if "step-" in line)
        assert "step-xxx" in row and "\u2026" in row and "!" not in row
        assert "0.780" in row and "78.0" in row  # the numbers whole
        screen = Console(file=io.StringIO(), width=width)
        screen.print(comparison_table(summary, summary, ("a", "b"), screen_width=width))
        row = next(line for line in screen.file.getvalue().splitlines() if "step-" in line)
        assert "\u2026" in row and "0.780" in row and "1.00x" in row
    assert long in summary["operations"]


def test_a_long_operation_name_leaves_the_plot_its_bars(tmp_path: Path) -> None:
    """matplotlib warned "Tight layout not applied" (four times per profile) and drew the
    bars in a sliver beside a 300-character label."""
    long = "step-" + "x" * 295
    summary = make_summary([(long, 0.0, 0.78, Category.SIMULATOR),
                            (long + "2", 0.78, 1.0, Category.BACKEND)])  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figure = breakdown_figure(summary)
    try:
        labels = [t.get_text() for t in figure.axes[0].get_xticklabels()]
        assert len(labels) == 2 and all(len(t) <= 24 and t.endswith("\u2026") for t in labels)
        assert len(figure.axes[0].patches) == 4  # two categories of two bars
    finally:
        import matplotlib.pyplot as plt

        plt.close(figure)
