"""`rlsys train ALGO --env ENV`: train a policy and write the results folder.

The folder (`--out`, default runs/train-<timestamp>) holds `config.toml` (the configuration
as run), `metrics.csv` (one row per iteration), TensorBoard event files of the same metrics,
`checkpoint.npz` and, written last, `summary.json`; a folder without `summary.json` is from a
run that did not finish (one that failed before training, on a bad environment say, leaves
no folder).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
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
        values.update(_read_toml(args.config, config_class))
    if getattr(args, "seed", None) is not None:
        values["seed"] = args.seed
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


def _read_toml(path: Path, config_class) -> dict[str, Any]:
    """The options of a TOML file, each checked against its field's type (a float field
    takes an integer too)."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise UsageError(f"cannot read config {path}: {err}") from None
    fields = {f.name: str(f.type) for f in dataclasses.fields(config_class)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise UsageError(f"{path}: unknown options {', '.join(unknown)}",
                         hint=f"known: {', '.join(sorted(fields))}")  # fmt: skip
    for name, value in data.items():
        kind = fields[name]
        if kind == "float" and type(value) is int:
            data[name] = float(value)
        elif type(value).__name__ != kind:
            example = f"{name} = {_toml_value(getattr(config_class, name))}"
            raise UsageError(f"{path}: {name} must be {_A_TYPE[kind]}, not {value!r}",
                             hint=f"e.g. {example}")  # fmt: skip
    return data


_A_TYPE = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


def _toml_value(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, bool) else str(value).lower()


def write_toml(values: dict[str, Any], path: Path) -> None:
    lines = [f"{key} = {_toml_value(value)}" for key, value in values.items()]
    path.write_text("\n".join(lines) + "\n")


def _resumed_config(args: argparse.Namespace):
    """The configuration of the run being resumed (options may not change)."""
    given = [n for n in [*_all_fields(), "seed", "out"] if getattr(args, n, None) is not None]
    if given or args.config is not None:
        flags = ", ".join("--" + n.replace("_", "-") for n in given) or "--config"
        raise UsageError(f"{flags}: a resumed run keeps its configuration",
                         hint=f"start a new run: --config {args.resume / 'config.toml'} "
                              "and the options to change")  # fmt: skip
    if not (args.resume / "config.toml").exists():
        raise UsageError(f"{args.resume} holds no config.toml",
                         hint="resume a folder written by `rlsys train`")  # fmt: skip
    from rlsys.training import CHECKPOINT, checkpoint_algo

    if (args.resume / CHECKPOINT).exists():
        algo = checkpoint_algo(args.resume / CHECKPOINT)
        if algo != args.algo:
            raise UsageError(f"{args.resume} is a run of {algo}, not {args.algo}",
                             hint=f"rlsys train {algo} --resume {args.resume}")  # fmt: skip
    config_class = ALGORITHMS[args.algo][0]
    return config_class(**_read_toml(args.resume / "config.toml", config_class)).validate()


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
        config = config_from_args(args)
        out = args.out or default_out_dir("train")
    if (out / "summary.json").exists():
        hint = "there is nothing left to run" if args.resume else "pass a new --out DIR"
        raise UsageError(f"{out} already holds a finished run", hint=hint)
    from rlsys.cli import compile_cache, make_out_dir

    cache = compile_cache(args)
    created = not out.exists()
    make_out_dir(out)
    if args.resume is None:
        write_toml(dataclasses.asdict(config), out / "config.toml")
    from rlsys.training import train

    try:
        with cache:
            summary = train(args.algo, config, out, quiet=args.quiet,
                            resume=args.resume is not None)  # fmt: skip
    except BaseException:
        if created and [p.name for p in out.iterdir()] == ["config.toml"]:
            shutil.rmtree(out)  # it failed before training: no folder of a run that never ran
        raise
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"trained {args.algo} on {config.env}: {summary['env_steps']:,} env steps in "
        f"{summary['train_seconds']:.1f} s ({summary['env_steps_per_second']:,.0f} steps/s, "
        f"after {summary['compile_seconds']:.1f} s of compilation), {_final_return(summary)}; "
        f"results in {out}"
    )
    return 0
