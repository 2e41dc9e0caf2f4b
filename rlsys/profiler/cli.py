"""`rlsys profile [--] COMMAND...` and `rlsys report DIR [DIR2]`: the profiler's command line.

`rlsys profile [--out DIR] [--quiet] [--max-seconds S] [--] python train.py ARGS...` runs the
command with recording on (a first word ending in `.py` runs with this Python). As with
pyinstrument and py-spy, options before the command are rlsys's and everything from the
command's first word on is the command's (`rlsys profile python train.py --out X` passes
`--out X` to train.py); `--` before the command is optional. Automatic operations
(`rlsys.profiler.hooks`) are recorded; then it writes into DIR (default
runs/profile-<timestamp>):

    trace/<pid>.jsonl   the raw recording, one file per Python process
    summary.json        per-operation seconds per category and resource (schema:
                        `rlsys.profiler.summary`)
    trace.json          Chrome/Perfetto trace (open in ui.perfetto.dev)
    breakdown.png       one stacked bar per operation, by category
    report.html         table, plot and verdict on one self-contained page
    gpu_util.png        where a GPU was found (NVML): true GPU-busy time vs polled utilization

and prints the per-operation table. Each file is written whole or not at all
(`rlsys.profiler.atomic`), and summary.json last: a folder with summary.json holds the whole
profile; one interrupted while writing (Ctrl-C, SIGTERM) holds the recording, trace/, and
perhaps some of the other files, but no summary.json, so `rlsys report` refuses it.

`--calibrate` first measures what the profiler costs this command (`rlsys.profiler.calibrate`:
`--calibration-runs N` runs of the command in each of three configurations, cached per
machine and command, `--recalibrate` to measure again), then profiles it and reports each
operation and the total corrected for that cost, next to the uninstrumented time.

Its exit code is the command's (128+N if a signal N
ended it); 0 when `--max-seconds` stopped the command, as asked; 2 when the command cannot
be started, recorded nothing (it is not Python) or the arguments are wrong. A signal N to
`rlsys profile` before its command starts (held from the start: `rlsys.cli`), before the
command recorded anything, or while the results are written ends it with one line,
`interrupted: ...`, and 128+N; before the command records, no folder is left.

`rlsys report DIR` prints a profile's table again (and redraws its plot and report.html into
--out, default DIR); `rlsys report DIR1 DIR2` compares two profiles operation by operation
(and writes compare.html into --out, default DIR2).

This module may import only `rlsys.trace` of rlsys (the layering rule), so it reports usage
errors itself, in the format of `rlsys.cli`: `error: ...` (and `hint: ...`), exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

from rlsys.profiler.atomic import replacing
from rlsys.profiler.calibrate import CalibrationError
from rlsys.profiler.collectors.gpu_tracing import GPU_ENV
from rlsys.profiler.collectors.nvml import start_sampler
from rlsys.profiler.diagnose import nothing_recorded
from rlsys.profiler.launch import (
    CommandError,
    Interrupted,
    child_environment,
    run_child,
    signals_interrupt,
)
from rlsys.profiler.summary import SummaryError, build_summary, load_summary, write_summary

EXIT_USAGE = 2
_DEFAULT_ROOT = Path("runs")  # of the default --out, runs/profile-<timestamp>

PROFILE_DESCRIPTION = (
    "Run any Python RL script under the profiler: `rlsys profile [options] [--] python "
    "train.py ARGS...`: options go before the command; everything from its first word on is "
    "the command's. Environment steps (gymnasium, Stable-Baselines3, envpool), policy "
    "inference and backpropagation (PyTorch, JAX) are recorded as operations without "
    "editing the script, each split into Python / simulator / ML backend time; the result "
    "folder holds summary.json, a Perfetto trace.json and breakdown.png. --calibrate "
    "measures and subtracts the profiler's own cost."
)
REPORT_DESCRIPTION = (
    "Print the table of a profile (`rlsys report DIR`) or compare two profiles operation by "
    "operation (`rlsys report DIR1 DIR2`)."
)


class _UsageError(Exception):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class _NothingRecorded(Exception):
    """The command ran and no process of it recorded anything: no profile, no folder."""

    def __init__(self, message: str, hint: str, exit_code: int) -> None:
        super().__init__(message)
        self.hint = hint
        self.exit_code = exit_code


def _fail(err: BaseException, hint: str | None = None, verb: str = "profile") -> int:
    print(f"error: {err}", file=sys.stderr)
    print(f"hint: {hint or f'see `rlsys {verb} --help`'}", file=sys.stderr)
    return EXIT_USAGE


def _unwritable(err: OSError) -> int:
    """Results that could not be written (a full disk, a folder where a file goes)."""
    where = f" {err.filename}" if err.filename else ""
    return _fail(f"cannot write{where}: {err.strerror or err}",
                 hint="free some disk space, or pass another --out DIR")  # fmt: skip


def add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--calibrate", action="store_true",
        help="measure the profiler's cost per event on this command (differential runs, "
        "cached) and report times corrected for it",
    )  # fmt: skip
    parser.add_argument(
        "--calibration-runs", type=int, default=5, metavar="N",
        help="runs of the command per calibration configuration (default 5; medians)",
    )  # fmt: skip
    parser.add_argument(
        "--recalibrate", action="store_true",
        help="with --calibrate: measure again instead of using the cached calibration",
    )  # fmt: skip
    parser.add_argument(
        "--max-seconds", type=float, default=None, metavar="S",
        help="stop the command (SIGINT) after S seconds and keep the partial profile",
    )  # fmt: skip
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="[--] COMMAND ...",
        help="the command to profile and its arguments, after rlsys's options; everything "
        "from its first word on is the command's (`python train.py --out x`: the script's "
        "--out); a `--` before it is optional",
    )  # fmt: skip


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dirs", nargs="+", metavar="DIR",
        help="a folder written by `rlsys profile`; two to compare them",
    )  # fmt: skip


def run_profile(args: argparse.Namespace) -> int:
    try:
        return _profile(args)
    except _UsageError as err:
        return _fail(err, err.hint)
    except (CommandError, CalibrationError) as err:
        return _fail(err)
    except _NothingRecorded as err:
        _fail(err, err.hint)
        return err.exit_code
    except OSError as err:
        return _unwritable(err)


def run_report(args: argparse.Namespace) -> int:
    try:
        with signals_interrupt():  # SIGTERM too: no temporary file is left
            return _report(args)
    except _UsageError as err:
        return _fail(err, err.hint, verb="report")
    except SummaryError as err:
        return _fail(err, verb="report")
    except OSError as err:
        return _unwritable(err)


def _command(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise _UsageError(
            "`rlsys profile` needs a command to run",
            hint="e.g. `rlsys profile -- python train.py`",
        )
    if command[0].endswith(".py"):
        command = [sys.executable, *command]
    script = command[1] if len(command) > 1 and Path(command[0]).name.startswith("python") else ""
    if script.endswith(".py") and not Path(script).is_file():  # else: an empty "complete" profile
        raise _UsageError(f"no script {script} (the command after `--`)")
    return command


def _profile(args: argparse.Namespace) -> int:
    command = _command(args)
    if args.max_seconds is not None and not args.max_seconds > 0:
        raise _UsageError(f"--max-seconds must be positive, not {args.max_seconds:g}")
    if args.calibrate:
        _check_calibration_options(args)
    if args.out is not None and _holds_results(args.out):
        raise _UsageError(f"{args.out} already holds a profile", hint="pass a new --out DIR")
    _stop_if_asked(args)
    fresh = _missing(args.out or _DEFAULT_ROOT)  # the folders this profile makes
    out = args.out or _new_default_folder()
    if args.out is None:
        fresh.insert(0, out)
    trace_dir = _made_folder(out / "trace")
    try:
        return _profile_into(args, command, out, trace_dir)
    except (CommandError, CalibrationError, _NothingRecorded, KeyboardInterrupt):
        # No profile, no folder left behind (rmdir: a folder holding a recording is kept)
        with contextlib.suppress(OSError):
            for folder in (trace_dir, *fresh):
                folder.rmdir()
        raise


def _missing(path: Path) -> list[Path]:
    """`path` and those of its parents that do not exist yet, deepest first."""
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():  # the root and the working folder do
            break
        missing.append(folder)
    return missing


def _profile_into(args: argparse.Namespace, command: list[str], out: Path,
                  trace_dir: Path) -> int:  # fmt: skip
    calibration = _calibration(command, args) if args.calibrate else None
    sampler = start_sampler()  # None without an NVIDIA GPU: then no GPU collector runs
    environment = child_environment(trace_dir)
    environment.pop(GPU_ENV, None)
    if sampler is not None:
        environment[GPU_ENV] = "1"  # the child starts torch/JAX GPU tracing on their import
    try:
        child = run_child(command, environment, args.max_seconds, lambda: _asked(args))
    finally:
        samples = sampler.stop() if sampler is not None else []
    exit_code = 0 if child.stopped_by == "max-seconds" else child.exit_code
    if child.left_running:
        print(f"rlsys profile: warning: left running after the command ended: "
              f"{', '.join(child.left_running)}", file=sys.stderr)  # fmt: skip
    if not any(trace_dir.glob("*.jsonl")):
        if child.stopped_by == "interrupt":  # a Ctrl-C as Python started
            raise Interrupted("before the command recorded anything; no profile written",
                              exit_code or 130)  # fmt: skip
        raise _NothingRecorded(*nothing_recorded(command), exit_code or EXIT_USAGE)
    try:
        with signals_interrupt():  # the recording is read, then the results written
            return _load_and_write(args, command, out, child, exit_code, samples, calibration)
    except KeyboardInterrupt as err:
        raise Interrupted(f"while writing the profile; the recording is in {trace_dir}",
                          getattr(err, "exit_code", 130)) from None  # fmt: skip


def _load_and_write(args: argparse.Namespace, command: list[str], out: Path, child,
                    exit_code: int, samples: list, calibration) -> int:  # fmt: skip
    from rlsys.trace import Session

    trace_dir = out / "trace"
    try:
        session = Session.load_dir(trace_dir, on_skip=_warn_skipped)
    except ValueError as err:  # TraceFormatError, or two files claiming one pid
        # The command ran and something was recorded (`nothing_recorded` is the other case)
        print(f"error: no profile: {err}", file=sys.stderr)
        print(f"hint: a file in {trace_dir} is damaged or not written by rlsys (kept there to "
              "look at); run the profile again into a new --out DIR", file=sys.stderr)  # fmt: skip
        return exit_code or EXIT_USAGE
    return _write_profile(session, out, command, child, exit_code, args.quiet, samples,
                          calibration)  # fmt: skip


def _warn_skipped(message: str) -> None:
    # A stray file in the trace folder, or a damaged line, costs its own events only.
    print(f"rlsys profile: warning: {message}", file=sys.stderr)


def _asked(args: argparse.Namespace) -> int | None:
    """The signal that asked `rlsys profile` to stop before its command started, if any:
    `rlsys.cli` holds SIGINT and SIGTERM from its start (`args.stops.requested`), as heavy
    imports could lose or garble the KeyboardInterrupt."""
    return getattr(getattr(args, "stops", None), "requested", None)


def _stop_if_asked(args: argparse.Namespace) -> None:
    signum = _asked(args)
    if signum is not None:
        raise Interrupted("before the command started", 128 + signum)


def _check_calibration_options(args: argparse.Namespace) -> None:
    if args.calibration_runs < 1:
        raise _UsageError(f"--calibration-runs must be at least 1, not {args.calibration_runs}")
    if args.max_seconds is not None:
        raise _UsageError(
            "--calibrate needs the command to run to its end (the same work in every run)",
            hint="drop --max-seconds, or make the command itself shorter",
        )


def _calibration(command: list[str], args: argparse.Namespace):
    """The cached calibration of `command`, or a new one (cached); one line per run to stderr."""
    from rlsys.profiler import calibrate

    if not args.recalibrate:
        cached = calibrate.load_cached(command)
        if cached is not None:
            print(f"rlsys profile: using the cached calibration "
                  f"({calibrate.cache_path(command)})", file=sys.stderr)  # fmt: skip
            return cached

    def report(run) -> None:
        print(f"rlsys profile: calibration run {run.configuration}: "
              f"{run.wall_ns / 1e9:.3f} s, events {dict(run.events)}", file=sys.stderr)  # fmt: skip
        _stop_if_asked(args)

    calibration = calibrate.calibrate(command, args.calibration_runs, on_run=report)
    path = calibrate.save_cached(calibration)
    for warning in calibration.warnings:
        print(f"rlsys profile: calibration: {warning}", file=sys.stderr)
    print(f"rlsys profile: calibration saved in {path}", file=sys.stderr)
    return calibration


def _write_profile(session, out: Path, command: list[str], child, exit_code: int,
                   quiet: bool, samples: list, calibration=None) -> int:  # fmt: skip
    from rlsys.profiler.breakdown import ProfileError, breakdown
    from rlsys.profiler.gpu import add_gpu_section
    from rlsys.profiler.render import console, plot_breakdown, print_summary
    from rlsys.profiler.report_html import write_report
    from rlsys.trace import write_chrome_trace

    with replacing(out / "trace.json") as temporary:
        write_chrome_trace(session, temporary)
    try:
        result = breakdown(session)
    except ProfileError as err:
        print(f"error: cannot attribute the recording in {out / 'trace'}: {err}", file=sys.stderr)
        return exit_code or 1
    summary = build_summary(
        result,
        command=command,
        exit_code=child.exit_code,
        stopped_by=child.stopped_by,
        wall_seconds=child.wall_seconds,
        calibration=calibration,
    )
    add_gpu_section(summary, session, samples, out)
    plot_breakdown(summary, out / "breakdown.png")
    write_report(summary, out)
    write_summary(summary, out)  # last: a folder with summary.json holds the whole profile
    screen = console()
    if not quiet:
        print_summary(screen, summary)
    partial = "" if summary["complete"] else " (partial)"
    screen.print(f"profile{partial} in {out}: summary.json, trace.json, breakdown.png, report.html",
                 markup=False, highlight=False)  # fmt: skip
    return exit_code


def _report(args: argparse.Namespace) -> int:
    from rlsys.profiler.gpu import plot_gpu
    from rlsys.profiler.render import comparison_table, console, plot_breakdown, print_summary
    from rlsys.profiler.report_html import write_comparison, write_report

    if len(args.dirs) > 2:
        raise _UsageError(
            f"`rlsys report` takes one folder or two to compare, not {len(args.dirs)}",
            hint="e.g. `rlsys report runs/profile-a runs/profile-b`",
        )
    summaries = [load_summary(d) for d in args.dirs]
    theirs = {Path(d).resolve() for d in args.dirs}
    if args.out is not None and args.out.resolve() not in theirs and _holds_results(args.out):
        raise _UsageError(f"--out {args.out} holds another profile, whose report this would "
                          "replace", hint="pass a new --out DIR, or leave --out out")  # fmt: skip
    out = _made_folder(args.out or Path(args.dirs[-1]))
    screen = console()
    try:
        if len(summaries) == 2:
            names = (str(args.dirs[0]), str(args.dirs[1]))
            screen.print(comparison_table(*summaries, names, screen_width=screen.width))
            page = write_comparison(summaries[0], summaries[1], names, out)
            if not args.quiet:
                screen.print(f"comparison in {page}", markup=False, highlight=False)
            return 0
        (summary,) = summaries
        print_summary(screen, summary)
        path = plot_breakdown(summary, out / "breakdown.png")
        if summary.get("gpu"):
            plot_gpu(summary["gpu"], out)
        page = write_report(summary, out)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        # load_summary checks the format and version; a field missing or of the wrong kind
        # shows where it is read
        folders = " or ".join(str(Path(d) / "summary.json") for d in args.dirs)
        raise SummaryError(f"{folders}: a field is missing or invalid ({err!r})") from None
    if not args.quiet:
        screen.print(f"plot in {path}, report in {page}", markup=False, highlight=False)
    return 0


def _holds_results(out: Path) -> bool:
    """Whether `out` holds a profile's recording or results (ours, or another tool's with
    the same names), which writing into it would replace."""
    trace = out / "trace"
    return (out / "summary.json").exists() or (trace.is_dir() and any(trace.glob("*.jsonl")))


def _new_default_folder() -> Path:
    """runs/profile-<timestamp>, made now (`rlsys.cli.default_out_dir`'s twin): a second
    profile started in the same second gets -2, -3, ..., not the first one's folder."""
    base = _DEFAULT_ROOT / f"profile-{time.strftime('%Y%m%d-%H%M%S')}"
    k = 1
    while True:
        out = base if k == 1 else base.with_name(f"{base.name}-{k}")
        try:
            out.mkdir(parents=True)
            return out
        except FileExistsError:
            k += 1
        except OSError as err:
            raise _UsageError(f"cannot create {out}: {err.strerror or err}",
                              hint="pass --out DIR, a folder you can write") from None  # fmt: skip


def _made_folder(out: Path) -> Path:
    """`out`, made if missing; a usage error now if it cannot be (`rlsys.cli.make_out_dir`'s
    twin: the profiler imports nothing of rlsys but the trace)."""
    if out.exists() and not out.is_dir():
        raise _UsageError(f"--out {out} is a file, not a folder", hint="pass a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _UsageError(f"cannot create {out}: {err.strerror or err}") from None
    return out
