"""`rlsys train ALGO --env ENV`: train a policy and write the results folder.

The folder (`--out`, default runs/train-<timestamp>) holds `config.toml` (the configuration
as run), `metrics.csv` (one row per iteration) and, written last, `summary.json`; a folder
without `summary.json` is from a run that did not finish.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any

from rlsys.algos.config import PPOConfig, field_docs
from rlsys.errors import UsageError

ALGORITHMS = {"ppo": PPOConfig}
DESCRIPTION = (
    "Train a policy with an algorithm written as a recurrent-tensor program. Available: "
    + ", ".join(ALGORITHMS)
    + ". Every field of the algorithm's configuration is an option; --config FILE.toml sets "
    "several at once (options given on the command line win)."
)
SKIP = {"seed"}  # already a common option of every verb


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("algo", metavar="ALGO", help=f"one of: {', '.join(ALGORITHMS)}")
    parser.add_argument("--config", type=Path, metavar="FILE", help="TOML file of options")
    docs = field_docs(PPOConfig)
    for field in dataclasses.fields(PPOConfig):
        if field.name in SKIP:
            continue
        flag = "--" + field.name.replace("_", "-")
        help_text = f"{docs.get(field.name, '')} (default: {field.default})"
        if field.type in (bool, "bool"):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None,
                                help=help_text)  # fmt: skip
        else:
            kind = {"int": int, "float": float, "str": str}[str(field.type)]
            parser.add_argument(flag, type=kind, default=None, metavar=kind.__name__.upper(),
                                help=help_text)  # fmt: skip


def config_from_args(args: argparse.Namespace) -> PPOConfig:
    if args.algo not in ALGORITHMS:
        raise UsageError(
            f"unknown algorithm {args.algo!r}", hint=f"choose one of: {', '.join(ALGORITHMS)}"
        )
    values: dict[str, Any] = {}
    if args.config is not None:
        values.update(_read_toml(args.config))
    for field in dataclasses.fields(PPOConfig):
        given = getattr(args, field.name, None)
        if given is not None:
            values[field.name] = given
    try:
        return PPOConfig(**values).validate()
    except TypeError as err:
        raise UsageError(f"bad configuration: {err}") from None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise UsageError(f"cannot read config {path}: {err}") from None
    known = {f.name: f for f in dataclasses.fields(PPOConfig)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise UsageError(f"{path}: unknown options {', '.join(unknown)}",
                         hint=f"known: {', '.join(known)}")  # fmt: skip
    return data


def write_toml(values: dict[str, Any], path: Path) -> None:
    lines = []
    for key, value in values.items():
        text = json.dumps(value) if not isinstance(value, bool) else str(value).lower()
        lines.append(f"{key} = {text}")
    path.write_text("\n".join(lines) + "\n")


def run(args: argparse.Namespace) -> int:
    from rlsys.cli import default_out_dir

    config = config_from_args(args)
    config = dataclasses.replace(config, seed=args.seed)
    out = args.out or default_out_dir("train")
    if (out / "summary.json").exists():
        raise UsageError(f"{out} already holds a finished run", hint="pass a new --out DIR")
    out.mkdir(parents=True, exist_ok=True)
    write_toml(dataclasses.asdict(config), out / "config.toml")
    from rlsys.training import train

    summary = train(config, out, quiet=args.quiet)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"trained {args.algo} on {config.env}: {summary['env_steps']:,} env steps in "
        f"{summary['train_seconds']:.1f} s ({summary['env_steps_per_second']:,.0f} steps/s, "
        f"after {summary['compile_seconds']:.1f} s of compilation), final mean episode "
        f"return {summary['final_episode_return']:.1f}; results in {out}"
    )
    return 0
