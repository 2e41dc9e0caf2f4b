"""`rlsys train ALGO --env ENV`: train a policy and write the results folder.

The folder (`--out`, default runs/train-<timestamp>) holds `config.toml` (the configuration
as run), `metrics.csv` (one row per iteration), TensorBoard event files of the same metrics,
`checkpoint.npz` and, written last, `summary.json`; a folder without `summary.json` is from a
run that did not finish.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any

from rlsys.algos import ALGORITHMS
from rlsys.algos.config import field_docs
from rlsys.errors import UsageError

DESCRIPTION = (
    "Train a policy with an algorithm written as a recurrent-tensor program. Every field of "
    "the algorithm's configuration is an option (marked [ALGO only] when not all have it); "
    "--config FILE.toml sets several at once (options given on the command line win)."
)
SKIP = {"seed"}  # already a common option of every verb


def _all_fields() -> dict[str, tuple[dataclasses.Field, str, list[str]]]:
    """Every config field: (field, help text, the algorithms that have it)."""
    merged: dict[str, tuple[dataclasses.Field, str, list[str]]] = {}
    for name, (config, _) in ALGORITHMS.items():
        docs = field_docs(config)
        for field in dataclasses.fields(config):
            if field.name in SKIP:
                continue
            known = merged.setdefault(field.name, (field, docs.get(field.name, ""), []))
            known[2].append(name)
    return merged


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("algo", metavar="ALGO", help=f"one of: {', '.join(ALGORITHMS)}")
    parser.add_argument("--config", type=Path, metavar="FILE", help="TOML file of options")
    parser.add_argument("--resume", type=Path, metavar="DIR",
                        help="continue the run in DIR from its checkpoint.npz")  # fmt: skip
    for name, (field, doc, algos) in _all_fields().items():
        flag = "--" + name.replace("_", "-")
        only = "" if len(algos) == len(ALGORITHMS) else f" [{', '.join(algos)} only]"
        help_text = f"{doc}{only}"
        if field.type in (bool, "bool"):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None,
                                help=help_text)  # fmt: skip
        else:
            kind = {"int": int, "float": float, "str": str}[str(field.type)]
            parser.add_argument(flag, type=kind, default=None, metavar=kind.__name__.upper(),
                                help=help_text)  # fmt: skip


def config_from_args(args: argparse.Namespace):
    if args.algo not in ALGORITHMS:
        choices = ", ".join(ALGORITHMS)
        raise UsageError(f"unknown algorithm {args.algo!r}", hint=f"choose one of: {choices}")
    config_class = ALGORITHMS[args.algo][0]
    own = {f.name for f in dataclasses.fields(config_class)}
    values: dict[str, Any] = {}
    if args.config is not None:
        values.update(_read_toml(args.config, own))
    for name in _all_fields():
        given = getattr(args, name, None)
        if given is None:
            continue
        if name not in own:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} is not an option of {args.algo}",
                             hint="see `rlsys train --help`")  # fmt: skip
        values[name] = given
    return config_class(**values).validate()


def _read_toml(path: Path, known: set[str]) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise UsageError(f"cannot read config {path}: {err}") from None
    unknown = sorted(set(data) - known)
    if unknown:
        raise UsageError(f"{path}: unknown options {', '.join(unknown)}",
                         hint=f"known: {', '.join(sorted(known))}")  # fmt: skip
    return data


def write_toml(values: dict[str, Any], path: Path) -> None:
    lines = []
    for key, value in values.items():
        text = json.dumps(value) if not isinstance(value, bool) else str(value).lower()
        lines.append(f"{key} = {text}")
    path.write_text("\n".join(lines) + "\n")


def _resumed_config(args: argparse.Namespace):
    """The configuration of the run being resumed (options may not change)."""
    given = [n for n in _all_fields() if getattr(args, n, None) is not None]
    if given or args.config is not None:
        flags = ", ".join("--" + n.replace("_", "-") for n in given) or "--config"
        raise UsageError(f"{flags}: a resumed run keeps its configuration",
                         hint=f"edit {args.resume / 'config.toml'} or start a new run")  # fmt: skip
    if not (args.resume / "config.toml").exists():
        raise UsageError(f"{args.resume} holds no config.toml",
                         hint="resume a folder written by `rlsys train`")  # fmt: skip
    config_class = ALGORITHMS[args.algo][0]
    own = {f.name for f in dataclasses.fields(config_class)}
    return config_class(**_read_toml(args.resume / "config.toml", own)).validate()


def _final_return(summary: dict) -> str:
    mean = summary["final_episode_return"]
    if mean is None:  # every episode was longer than the run (HalfCheetah: 1,000 steps)
        return "no episode ended"
    return f"final mean episode return {mean:.1f}"


def run(args: argparse.Namespace) -> int:
    from rlsys.cli import default_out_dir

    if args.algo not in ALGORITHMS:
        config_from_args(args)  # raises the unknown-algorithm error
    if args.resume is not None:
        config, out = _resumed_config(args), args.resume
    else:
        config = dataclasses.replace(config_from_args(args), seed=args.seed)
        out = args.out or default_out_dir("train")
    if (out / "summary.json").exists():
        raise UsageError(f"{out} already holds a finished run", hint="pass a new --out DIR")
    from rlsys.cli import compile_cache

    cache = compile_cache(args)
    out.mkdir(parents=True, exist_ok=True)
    if args.resume is None:
        write_toml(dataclasses.asdict(config), out / "config.toml")
    from rlsys.training import train

    with cache:
        summary = train(args.algo, config, out, quiet=args.quiet, resume=args.resume is not None)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"trained {args.algo} on {config.env}: {summary['env_steps']:,} env steps in "
        f"{summary['train_seconds']:.1f} s ({summary['env_steps_per_second']:,.0f} steps/s, "
        f"after {summary['compile_seconds']:.1f} s of compilation), {_final_return(summary)}; "
        f"results in {out}"
    )
    return 0
