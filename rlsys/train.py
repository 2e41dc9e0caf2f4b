"""`rlsys train ALGO --env ENV`: train a policy and write the results folder.

The folder (`--out`, default runs/train-<timestamp>; new or empty) holds `config.toml` (the
configuration as run, under a comment naming the algorithm), `metrics.csv` (one row per
iteration), TensorBoard event files of the same metrics, `checkpoint.npz` and, written last,
`summary.json`; a folder without `summary.json` is from a run that did not finish (one that
failed before its first checkpoint, on a bad environment say, leaves nothing in it).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import tomllib
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

from rlsys.algos import ALGORITHMS
from rlsys.algos.config import field_docs
from rlsys.errors import UsageError

DESCRIPTION = (
    "Train a policy with an algorithm written as a recurrent-tensor program. Every field of "
    "the algorithm's configuration is an option (marked [ALGO only] when not all have it); "
    "--config FILE (.toml, .yaml or .yml) sets several at once (options given on the command "
    "line win)."
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
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="TOML or YAML file of options (e.g. a run's config.toml)")  # fmt: skip
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
        values.update(read_config(args.config, config_class))
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


def read_config(path: Path, config_class) -> dict[str, Any]:
    """The options of a TOML or YAML file (by its suffix), each checked against its field's
    type (a float field takes an integer too)."""
    yaml = path.suffix in (".yaml", ".yml")
    try:
        data = _parse_yaml(path.read_text()) if yaml else tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise UsageError(f"cannot read config {path}: {err}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected options as `name: value` lines, not {data!r}")
    fields = {f.name: str(f.type) for f in dataclasses.fields(config_class)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise UsageError(f"{path}: unknown options {', '.join(map(str, unknown))}",
                         hint=f"known: {', '.join(sorted(fields))}")  # fmt: skip
    for name, value in data.items():
        kind = fields[name]
        if kind == "float" and type(value) is int:
            data[name] = float(value)
        elif kind == "float" and yaml and type(value) is str and _is_number(value):
            data[name] = float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string
        elif type(value).__name__ != kind:
            default = getattr(config_class, name)
            example = f"{name}: {default}" if yaml else f"{name} = {_toml_value(default)}"
            raise UsageError(f"{path}: {name} must be {_A_TYPE[kind]}, not {value!r}",
                             hint=f"e.g. {example}")  # fmt: skip
    return data


def _parse_yaml(text: str) -> Any:
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        """YAML's safe loader, refusing a key given twice (PyYAML keeps the last silently;
        TOML refuses it too)."""

        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, Hashable):
                    continue  # PyYAML's own error says so
                if key in seen:
                    where = f"line {key_node.start_mark.line + 1}"
                    raise ValueError(f"option {key!r} is given twice ({where})")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    try:
        return yaml.load(text, Loader=UniqueKeys) or {}  # a SafeLoader: no objects built
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        if mark is None:
            raise ValueError(" ".join(str(err).split())) from None
        where = f"line {mark.line + 1}, column {mark.column + 1}"
        raise ValueError(f"{getattr(err, 'problem', None) or 'not YAML'} ({where})") from None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


_A_TYPE = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # TOML's inf, -inf and nan, which JSON lacks
    return json.dumps(value)


_HEADER = "# rlsys train {algo}: the configuration of this run (`--config` reads it)"


def write_toml(values: dict[str, Any], path: Path, algo: str) -> None:
    lines = [_HEADER.format(algo=algo), *(f"{k} = {_toml_value(v)}" for k, v in values.items())]
    path.write_text("\n".join(lines) + "\n")


def config_algo(path: Path) -> str | None:
    """The algorithm a run's config.toml names in its first line, if it does."""
    try:
        first = path.read_text().split("\n", 1)[0]
    except (OSError, UnicodeDecodeError):
        return None
    prefix, _, _ = _HEADER.partition("{algo}")
    algo = first.removeprefix(prefix).split(":", 1)[0] if first.startswith(prefix) else None
    return algo if algo in ALGORITHMS else None


def _resumed_config(args: argparse.Namespace):
    """The configuration of the run being resumed (options may not change)."""
    given = [n for n in [*_all_fields(), "seed", "out"] if getattr(args, n, None) is not None]
    if given or args.config is not None:
        flags = ", ".join("--" + n.replace("_", "-") for n in given) or "--config"
        raise UsageError(f"{flags}: a resumed run keeps its configuration",
                         hint=f"start a new run: --config {args.resume / 'config.toml'} "
                              "and the options to change")  # fmt: skip
    if not args.resume.is_dir():
        raise UsageError(f"--resume {args.resume}: no such folder",
                         hint="resume a folder written by `rlsys train`")  # fmt: skip
    if not (args.resume / "config.toml").exists():
        raise UsageError(f"{args.resume} holds no config.toml",
                         hint="resume a folder written by `rlsys train`")  # fmt: skip
    from rlsys.training import CHECKPOINT, checkpoint_algo

    checkpoint = args.resume / CHECKPOINT
    if checkpoint.exists():
        algo = checkpoint_algo(checkpoint)
    else:  # stopped before its first checkpoint: it starts again from iteration 0
        algo = config_algo(args.resume / "config.toml")
    if algo is not None and algo != args.algo:
        raise UsageError(f"{args.resume} is a run of {algo}, not {args.algo}",
                         hint=f"rlsys train {algo} --resume {args.resume}")  # fmt: skip
    config_class = ALGORITHMS[args.algo][0]
    return config_class(**read_config(args.resume / "config.toml", config_class)).validate()


def _check_new_out(out: Path) -> None:
    """A new run goes into a new or empty folder: its files would mix with others."""
    if not out.is_dir() or not any(out.iterdir()):
        return
    algo = config_algo(out / "config.toml")
    if algo is not None:
        raise UsageError(f"--out {out} holds an unfinished run of {algo}",
                         hint=f"continue it with `rlsys train {algo} --resume {out}`, or "
                              "pass a new --out DIR")  # fmt: skip
    raise UsageError(f"--out {out} is not empty", hint="pass a new or empty --out DIR")


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """An exclusive lock on the folder while a run writes it: two runs writing one folder
    would interleave their metrics and checkpoints."""
    import fcntl

    handle = os.open(out, os.O_RDONLY)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            hint = "wait for it to end, or pass another --out"
            raise UsageError(f"{out}: another `rlsys train` is writing it", hint=hint) from None
        yield
    finally:
        os.close(handle)  # and with it the lock


def _remove_unsaved(out: Path, created: bool, failed: bool) -> None:
    """A new run that saved nothing leaves no trace: its files go (config.toml only, if it
    was stopped after training started: `--resume` starts that one again), and the folder
    if it made it; then the same command, corrected, can run in it. Never an error that
    would hide the failure's own (the folder may have been removed or filled meanwhile)."""
    from rlsys.scalar_log import EVENT_FILE_GLOB
    from rlsys.training import CHECKPOINT

    with contextlib.suppress(OSError):
        files = {p.name for p in out.iterdir()}
        ours = {"config.toml", "metrics.csv", *(p.name for p in out.glob(EVENT_FILE_GLOB))}
        if CHECKPOINT in files or not files <= ours or (not failed and files != {"config.toml"}):
            return
        for name in files:
            (out / name).unlink()
        if created:
            out.rmdir()


def _final_return(summary: dict) -> str:
    mean = summary["final_episode_return"]
    if mean is None:  # every episode was longer than the run (HalfCheetah: 1,000 steps)
        return "no episode ended"
    return f"final mean episode return {mean:.1f}"


def run(args: argparse.Namespace) -> int:
    from rlsys.cli import compile_cache, default_out_dir, make_out_dir

    if args.algo not in ALGORITHMS:
        config_from_args(args)  # raises the unknown-algorithm error
    if args.resume is not None:
        config, out = _resumed_config(args), args.resume
    else:
        config, out = config_from_args(args), args.out
    if out is not None and (out / "summary.json").exists():
        hint = "there is nothing left to run" if args.resume else "pass a new --out DIR"
        raise UsageError(f"{out} already holds a finished run", hint=hint)
    if out is not None and args.resume is None:
        _check_new_out(out)
    from rlsys.training import train  # before the folder: a Ctrl-C here leaves none

    cache = compile_cache(args)
    created = out is None or not out.exists()
    out = make_out_dir(out) if out is not None else default_out_dir("train")
    with _locked(out):
        if args.resume is None:
            write_toml(dataclasses.asdict(config), out / "config.toml", args.algo)
        try:
            with cache:
                summary = train(args.algo, config, out, quiet=args.quiet,
                                resume=args.resume is not None,
                                stops=getattr(args, "stops", None))  # fmt: skip
        except BaseException as err:
            if args.resume is None:
                _remove_unsaved(out, created, failed=not isinstance(err, KeyboardInterrupt))
            raise
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    resumed = summary["resumed_at_iteration"] * config.batch_size
    steps = f"{summary['env_steps']:,} env steps"
    if resumed:  # the time and rate are this process's
        steps += f" ({summary['env_steps'] - resumed:,} since resuming)"
    print(
        f"trained {args.algo} on {config.env}: {steps} in "
        f"{summary['train_seconds']:.1f} s ({summary['env_steps_per_second']:,.0f} steps/s, "
        f"after {summary['compile_seconds']:.1f} s of compilation), {_final_return(summary)}; "
        f"results in {out}"
    )
    return 0
