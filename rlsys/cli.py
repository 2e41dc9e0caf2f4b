"""The `rlsys` command line: `train | profile | sweep | report | bench`.

Conventions shared by every verb: `--out DIR` for its result folder (default
`runs/<verb>-<timestamp>`), `--seed`, `--quiet`. A usage error prints one line and a hint and
exits 2; so does a verb that is not built yet.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rlsys import __version__
from rlsys.errors import UsageError
from rlsys.stop_signals import HeldStops, StopRequests

EXIT_USAGE = 2
NEGATIVE_NUMBER = r"^-((\d+\.?\d*|\.\d+)(e[-+]?\d+)?|inf|infinity|nan)$"  # what float() reads


def default_out_dir(verb: str) -> Path:
    """A new folder runs/<verb>-<timestamp>, made now: two runs started in the same second
    get -2, -3, ... rather than one folder (mkdir claims it atomically)."""
    base = Path("runs") / f"{verb}-{time.strftime('%Y%m%d-%H%M%S')}"
    k = 1
    while True:
        out = base if k == 1 else base.with_name(f"{base.name}-{k}")
        try:
            out.mkdir(parents=True)
            return out
        except FileExistsError:
            k += 1
        except OSError as err:
            raise UsageError(f"cannot create {out}: {err.strerror}",
                             hint="pass --out DIR, a folder you can write") from None  # fmt: skip


def make_out_dir(out: Path) -> Path:
    """`out` (--out), made if missing; a usage error now, before any work, if it cannot be."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a folder", hint="pass a new --out DIR")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--out {out}: {err.strerror}", hint="pass a new --out DIR") from None
    return out


def folder(text: str) -> Path:
    """An argparse type for a folder option: an empty one would be Path(".") (the working
    folder) and fill it with results."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path; give a folder")
    return Path(text)


def _add_common_options(parser: argparse.ArgumentParser, writes: bool = True,
                        seeded: bool = True, out_default: str = "runs/<verb>-<timestamp>",
                        ) -> None:  # fmt: skip
    """--out (for a verb that `writes` results), --seed (and `seeded`: one that draws random
    numbers) and --quiet. --seed's default is None so that a value from elsewhere (a config
    file) is used unless it is given."""
    if writes:
        parser.add_argument(
            "--out", type=folder, default=None, metavar="DIR",
            help=f"folder for the results (default: {out_default})",
        )  # fmt: skip
    if writes and seeded:
        parser.add_argument("--seed", type=int, default=None, help="random seed (default: 0)")
    parser.add_argument("--quiet", action="store_true", help="print only errors and the result")


def add_compile_cache_options(parser: argparse.ArgumentParser) -> None:
    # The default is said in words, not as `rlsys.compiler.disk_cache.default_directory()`:
    # importing that module imports JAX (about 2 s), for every verb's parser.
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--compile-cache", type=folder, default=None, metavar="DIR",
        help="keep compiled programs in DIR, so that running one again skips XLA's "
             "compilation (default: $XDG_CACHE_HOME/rlsys/jax, else ~/.cache/rlsys/jax)",
    )  # fmt: skip
    group.add_argument("--no-compile-cache", action="store_true",
                       help="compile afresh and keep nothing")  # fmt: skip


def compile_cache(args: argparse.Namespace):
    """The disk cache of compiled programs the options ask for, as a context manager; a
    folder that cannot be one is a usage error now, before any result is written."""
    from rlsys.compiler.disk_cache import default_directory, disk_cache

    if args.no_compile_cache:
        return disk_cache(None)
    directory = args.compile_cache or default_directory()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        why = None if os.access(directory, os.W_OK) else "not writable"
    except OSError as err:
        why = err.strerror
    if why:
        raise UsageError(f"--compile-cache {directory}: {why}",
                         hint="give a writable folder, or --no-compile-cache")  # fmt: skip
    return disk_cache(directory)


def _not_built(verb: str, issue: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        raise UsageError(
            f"`rlsys {verb}` is not built yet in rlsys {__version__}",
            hint=f"it is planned in {issue}; see the README for what works today",
        )

    return run


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors become one line plus a hint (exit code 2), and every
    negative number is a value: argparse's own pattern takes `-1e-3` and `-inf` for options
    (`--learning-rate -1e-3`: "expected one argument")."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(NEGATIVE_NUMBER, re.IGNORECASE)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}", hint=f"see `{self.prog} --help`")

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        # The innermost (sub)parser that parsed the arguments names itself first (its
        # namespace is copied into its parent's): an option it does not know is reported
        # as its own (`rlsys train: unrecognized arguments`), with its --help.
        namespace, extras = super().parse_known_args(args, namespace)
        if not hasattr(namespace, "_prog"):
            namespace._prog = self.prog
        return namespace, extras

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            prog = namespace._prog
            raise UsageError(f"{prog}: unrecognized arguments: {' '.join(extras)}",
                             hint=f"see `{prog} --help`")  # fmt: skip
        return namespace


def build_parser() -> argparse.ArgumentParser:
    from rlsys.bench import cli as bench_cli

    parser = _Parser(
        prog="rlsys",
        description="Fast deep-RL training that shows where its time goes.",
    )
    parser.add_argument("--version", action="version", version=f"rlsys {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    from rlsys.profiler import cli as profiler_cli

    profile = verbs.add_parser(
        "profile",
        help="profile any RL script across the stack",
        description=profiler_cli.PROFILE_DESCRIPTION,
    )
    _add_common_options(profile, seeded=False)  # the script draws its own numbers
    profiler_cli.add_profile_arguments(profile)
    profile.set_defaults(run=profiler_cli.run_profile)
    planned = {
        "sweep": ("find the best CPU/GPU ratio of the runtime [not built yet]", "a later issue"),
    }
    for verb, (summary, issue) in planned.items():
        sub = verbs.add_parser(verb, help=summary, description=summary)
        _add_common_options(sub)
        sub.set_defaults(run=_not_built(verb, issue))
    report = verbs.add_parser(
        "report", help="render or compare profiles", description=profiler_cli.REPORT_DESCRIPTION
    )
    _add_common_options(report, seeded=False, out_default="the last DIR")
    profiler_cli.add_report_arguments(report)
    report.set_defaults(run=profiler_cli.run_report)
    from rlsys import train as train_cli

    train = verbs.add_parser("train", help="train a policy", description=train_cli.DESCRIPTION)
    _add_common_options(train)
    train_cli.add_arguments(train)
    add_compile_cache_options(train)
    train.set_defaults(run=train_cli.run)
    from rlsys import evaluate as eval_cli

    evaluate = verbs.add_parser("eval", help="run a trained policy",
                                description=eval_cli.DESCRIPTION)  # fmt: skip
    _add_common_options(evaluate, writes=False)  # it prints; the seed is the run's
    eval_cli.add_arguments(evaluate)
    add_compile_cache_options(evaluate)
    evaluate.set_defaults(run=eval_cli.run)
    bench = verbs.add_parser(
        "bench", help="run benchmark cases side by side", description=bench_cli.DESCRIPTION
    )
    _add_common_options(bench)
    bench_cli.add_arguments(bench)
    bench.set_defaults(run=bench_cli.run)
    return parser


OUT_OF_MEMORY_HINTS = {
    "train": "lower --num-envs, --num-steps (a rollout holds num_envs x num_steps steps) "
    "or the network's size (--hidden-size, --hidden-layers)",
    "eval": "lower --episodes: every episode runs in its own environment, all at once",
}


def _out_of_memory(err: BaseException) -> bool:
    """NumPy's and Python's MemoryError, or XLA's RESOURCE_EXHAUSTED (a JAX runtime error)."""
    if isinstance(err, MemoryError):
        return True
    return type(err).__module__.startswith("jax") and "RESOURCE_EXHAUSTED" in str(err)


def _see_help(args: argparse.Namespace | None) -> str:
    verb = getattr(args, "verb", None)
    return f"see `rlsys {verb} --help`" if verb else "see `rlsys --help`"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `rlsys train` stops on Ctrl-C or SIGTERM where it can checkpoint, and `rlsys profile`
    # before it starts its command; their handlers go in first, so that a signal during the
    # imports (JAX: about 2 s) is not lost either.
    guards = {"train": StopRequests, "profile": HeldStops}
    guard = guards.get(argv[0]) if argv else None
    with guard() if guard else contextlib.nullcontext() as stops:
        return _main(argv, stops)


def _main(argv: list[str], stops: StopRequests | None) -> int:
    args = None
    try:
        parser = build_parser()  # in the try: a Ctrl-C in its imports is one line too
        args = parser.parse_args(argv)
        if args.verb is None:
            parser.print_help()
            return EXIT_USAGE
        args.stops = stops
        return int(args.run(args) or 0)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        print(f"hint: {err.hint or _see_help(args)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as err:
        # Only a verb that imported the compiler (and JAX) can raise its errors: `rlsys
        # profile` and `rlsys report` start without it
        compiler = sys.modules.get("rlsys.compiler.errors")
        too_large = compiler.ProgramTooLargeError if compiler else ()
        if (
            compiler
            and isinstance(err, compiler.RecurrenceError)
            and not isinstance(err, MemoryError)
        ):
            print(f"error: {err}", file=sys.stderr)  # a program that cannot be built
            print(f"hint: {_see_help(args)}", file=sys.stderr)
            return EXIT_USAGE
        if not _out_of_memory(err):
            raise
        why = (str(err).strip().splitlines() or [type(err).__name__])[0]
        what = "too large" if isinstance(err, too_large) else "out of memory"
        print(f"error: {what}: {why}", file=sys.stderr)
        hint = OUT_OF_MEMORY_HINTS.get(getattr(args, "verb", None) or "", "make the job smaller")
        print(f"hint: {hint}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as err:  # Ctrl-C; `rlsys train` says what it saved
        print(f"interrupted: {err}" if str(err) else "interrupted", file=sys.stderr)
        return getattr(err, "exit_code", 130)


if __name__ == "__main__":
    sys.exit(main())
