"""`rlsys bench list` and `rlsys bench run CASE...`: the command-line face of the harness.

Everything heavy (jax, gymnasium) happens in child processes; this module imports only
the standard library and rich, so `rlsys bench --help` stays instant.
"""

from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path

from rlsys.bench.case import CASES_HINT, Case, case_names, cases_dir_or_error, load_case
from rlsys.bench.runner import CaseRun, Record, machine_info, run_case, write_json
from rlsys.bench.table import (
    case_table,
    markdown,
    replace_section,
    summarize,
    table_rows,
    update_results_file,
)
from rlsys.errors import UsageError

DESCRIPTION = (
    "Run benchmark cases: each system of a case in its own process, alternating, several "
    "times; report medians of wall time, throughput and peak memory, and ratios against the "
    "case's baseline."
)
DEFAULT_CASES_DIR = Path("benchmarks/cases")
DEFAULT_REPS, QUICK_REPS = 5, 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    listing = actions.add_parser("list", help="list the cases and their systems")
    _add_cases_dir(listing)
    run = actions.add_parser(
        "run", help="run cases and write their results", description=DESCRIPTION
    )
    run.add_argument("cases", nargs="+", metavar="CASE", help="case names (see `list`)")
    run.add_argument(
        "--reps",
        type=int,
        default=None,
        help=f"runs per system (default {DEFAULT_REPS}, {QUICK_REPS} with --quick)",
    )
    run.add_argument("--quick", action="store_true", help="smaller workloads and fewer runs")
    run.add_argument(
        "--systems",
        default=None,
        metavar="A,B",
        help="only these systems (comma-separated; default: all)",
    )
    run.add_argument(
        "--results-md",
        type=Path,
        default=None,
        metavar="PATH",
        help="also write each case's section into this markdown file",
    )
    run.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds allowed per run (default: the case's, usually 600)",
    )
    _add_cases_dir(run)
    for sub in (listing, run):  # accept the common options after the action too
        sub.add_argument(
            "--out",
            type=Path,
            default=argparse.SUPPRESS,
            metavar="DIR",
            help="folder for the results (default: runs/bench-<timestamp>)",
        )
        sub.add_argument("--seed", type=int, default=argparse.SUPPRESS, help="random seed")
        sub.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS,
                         help="print only errors and the result")  # fmt: skip


def _add_cases_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cases-dir", type=Path, default=DEFAULT_CASES_DIR, metavar="DIR",
        help=f"where the case files are (default: {DEFAULT_CASES_DIR})",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if args.action is None:
        raise UsageError("`rlsys bench` needs an action: `list` or `run`",
                         hint="see `rlsys bench --help`")  # fmt: skip
    if args.action == "list":
        return _list(args)
    return _run(args)


def _list(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    cases_dir = cases_dir_or_error(args.cases_dir)
    names = case_names(cases_dir)
    if not names:
        raise UsageError(f"no benchmark cases in {str(cases_dir)!r}", hint=CASES_HINT)
    table = Table("case", "description", "systems (baseline first)", show_lines=True)
    for name in names:
        case = load_case(cases_dir, name)
        systems = [case.baseline] + [s for s in case.system_names if s != case.baseline]
        notes = []
        for system in systems:
            reason = case.system(system).skip_reason()
            notes.append(
                system if reason is None else f"{system} [dim](skipped: {escape(reason)})[/]"
            )
        table.add_row(escape(case.name), escape(case.description), "\n".join(notes))
    _console().print(table)
    return 0


def _run(args: argparse.Namespace) -> int:
    from rlsys.cli import default_out_dir, make_out_dir

    if args.reps is not None and args.reps < 1:
        raise UsageError(f"--reps must be at least 1, not {args.reps}")
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError(f"--timeout must be positive, not {args.timeout:g}")
    reps = args.reps or (QUICK_REPS if args.quick else DEFAULT_REPS)
    cases_dir = cases_dir_or_error(args.cases_dir)
    cases = [load_case(cases_dir, name) for name in dict.fromkeys(args.cases)]
    selection = _systems_per_case(cases, args.systems)
    if args.results_md is not None:  # find broken markers now, not after minutes of runs
        if args.results_md.is_dir() or not args.results_md.parent.is_dir():
            raise UsageError(f"--results-md {args.results_md}: not a file in an existing folder")
        text = args.results_md.read_text() if args.results_md.is_file() else ""
        for case in cases:
            replace_section(text, case.name, "")
    out = make_out_dir(args.out or default_out_dir("bench"))  # results come after the runs
    command = _command(args, reps)
    console, errors = _console(), _console(stderr=True)
    machine = machine_info()
    status = 0
    for case in cases:
        systems = selection[case.name]
        if not systems:
            if not args.quiet:
                note = f"{case.name}: none of --systems {args.systems} in it"
                console.print(note, style="dim", markup=False)
            continue
        if not args.quiet:
            console.print(f"[bold]{case.name}[/]: {', '.join(systems)}; {reps} run(s) each")
        started = time.perf_counter()
        result = run_case(
            case, systems, reps=reps, quick=args.quick, seed=args.seed or 0,
            timeout_s=args.timeout, on_record=_progress(console, case, args.quiet),
        )  # fmt: skip
        for record in result.failed:
            _print_failure(errors, case, record)
        rows = summarize(result.records, systems, case.baseline, result.skipped)
        json_path = out / f"{case.name}.json"
        write_json(json_path, result, command=command, machine=machine,
                   summary=[r.to_dict() for r in rows])  # fmt: skip
        section = markdown(result, rows, command=command, machine=machine)
        (out / f"{case.name}.md").write_text(section)
        _print_table(console, result, rows, time.perf_counter() - started)
        written = [json_path]
        if args.results_md is not None and result.failed:
            # A curated results file keeps its last good section rather than a failed one.
            errors.print(f"{args.results_md} not updated for {case.name}: some runs failed",
                         style="red", markup=False)  # fmt: skip
        elif args.results_md is not None:
            update_results_file(args.results_md, case.name, section)
            written.append(args.results_md)
        if not args.quiet:
            console.print(f"wrote {' and '.join(map(str, written))}", markup=False)
        if result.failed:
            status = 1
    return status


def _console(stderr: bool = False):
    """A rich console; wide when not a terminal, so that logs and CI keep tables whole."""
    from rich.console import Console

    console = Console(stderr=stderr)
    if not console.is_terminal:
        console = Console(stderr=stderr, width=160)
    return console


def _systems_per_case(cases: list[Case], systems: str | None) -> dict[str, list[str]]:
    if systems is None:
        return {case.name: case.system_names for case in cases}
    wanted = [s.strip() for s in systems.split(",") if s.strip()]
    known = {name for case in cases for name in case.system_names}
    unknown = [s for s in wanted if s not in known]
    if unknown or not wanted:
        listing = "; ".join(f"{c.name}: {', '.join(c.system_names)}" for c in cases)
        raise UsageError(
            f"unknown system(s) {', '.join(unknown) or repr(systems)} for --systems",
            hint=f"known systems: {listing}",
        )
    return {case.name: [s for s in case.system_names if s in wanted] for case in cases}


def _command(args: argparse.Namespace, reps: int) -> str:
    """The command line that reproduces this run (what the results file cites)."""
    parts = ["rlsys", "bench", "run", *dict.fromkeys(args.cases)]
    if args.quick:
        parts.append("--quick")
    if args.reps is not None:
        parts += ["--reps", str(reps)]
    if args.systems is not None:
        parts += ["--systems", args.systems]
    if args.seed:
        parts += ["--seed", str(args.seed)]
    if args.timeout is not None:
        parts += ["--timeout", f"{args.timeout:g}"]
    if args.cases_dir != DEFAULT_CASES_DIR:
        parts += ["--cases-dir", str(args.cases_dir)]
    if args.results_md is not None:
        parts += ["--results-md", str(args.results_md)]
    return shlex.join(parts)  # --out and --quiet change where and how, not what: left out


def _progress(console, case: Case, quiet: bool):
    from rich.markup import escape

    def show(record: Record, done: int, total: int) -> None:
        if quiet:
            return
        if record.ok:
            rate = f"{record.rate:,.0f} {case.unit}/s" if record.rate is not None else ""
            text = f"{record.wall_s:6.2f} s  {record.peak_rss_bytes / 2**20:7.0f} MiB  {rate}"
        else:
            text = f"[red]failed: {escape(record.error or '')}[/]"
        counter = f"[{done}/{total}]".ljust(len(f"[{total}/{total}]"))
        console.print(f"  {escape(counter)} {record.system:<22} rep {record.rep + 1}  {text}")

    return show


def _print_failure(console, case: Case, record: Record) -> None:
    message = f"{case.name}/{record.system} run {record.rep + 1} failed: {record.error}"
    console.print(message, style="red", markup=False, highlight=False)
    if record.output_tail:
        console.print(f"[dim]last {len(record.output_tail)} lines of its output:[/]")
        for line in record.output_tail:
            console.print(f"  {line}", markup=False, highlight=False)


def _print_table(console, result: CaseRun, rows, seconds: float) -> None:
    from rich.markup import escape
    from rich.table import Table

    header, cells = table_rows(result, rows)
    title = f"{result.case.name}: medians of {result.reps} run(s) ({seconds:.0f} s)"
    table = Table(*map(escape, header), title=escape(title))
    for column in table.columns[1:]:
        column.justify = "right"
    table.columns[0].no_wrap = True
    for row, summary in zip(cells, rows, strict=True):
        if summary.skipped is None:  # skipped ones are listed below the table
            table.add_row(*map(escape, row))
    console.print(table)
    extra = case_table(result, rows)
    if extra:
        console.print(extra, markup=False, highlight=False, soft_wrap=True)
    for row in rows:
        if row.skipped is not None:
            console.print(f"{row.system}: skipped, {row.skipped}", markup=False, highlight=False)
