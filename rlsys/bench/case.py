"""What a benchmark case is, and how the runner finds one.

A case is a plain Python file, `benchmarks/cases/<name>.py`, that defines `CASE = Case(...)`.
The same file plays two roles:

* the runner (`rlsys bench run`) imports it to read the case's description and systems; so
  its top level must stay light (heavy imports such as jax go inside the system functions);
* each measured run executes it as a child process, `python <file> --system NAME [--quick]
  [--seed S]`, whose `__main__` block calls `rlsys.bench.child_main(CASE)`.

Cases are loaded by file path rather than as a package: they live in the repository checkout,
not in the installed `rlsys`, so that anyone can add one without touching the library.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rlsys.errors import UsageError

CASES_HINT = "run from an rlsys checkout or pass --cases-dir"


def installed(*modules: str) -> Callable[[], bool]:
    """A `System.available` check: whether every one of `modules` can be imported (found,
    not imported: the runner must not load them)."""
    return lambda: all(importlib.util.find_spec(m) is not None for m in modules)


@dataclass(frozen=True)
class System:
    """One contender in a case, e.g. `gymnax-jit-512`.

    `run(quick=..., seed=..., **params)` does the work in the child process and calls
    `rlsys.bench.report(...)`. `available()` returning False marks the system as skipped
    (for example an optional package missing) with `missing` as the reason; it is called in
    the runner, so it should look for the package rather than import it (`installed`).
    """

    name: str
    run: Callable[..., None] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    available: Callable[[], bool] | None = None
    missing: str = "not installed"

    def skip_reason(self) -> str | None:
        """None when the system can run here, else why not."""
        if self.available is None or self.available():
            return None
        return self.missing


@dataclass(frozen=True)
class Case:
    """A named benchmark: several systems doing the same work, one of them the baseline.

    `unit` names what the throughput counts ("env steps", "calls"); tables show `<unit>/s`.
    `timeout_s` bounds each child process. `summary_table(summaries)`, if given, turns the
    per-system medians (`rlsys.bench.table.Summary`) into a markdown table of the case's own
    (e.g. systems that are points of a grid, pivoted to one row per point), shown and written
    after the standard one.
    """

    name: str
    description: str
    baseline: str
    systems: Sequence[System]
    unit: str = "env steps"
    timeout_s: float = 600.0
    path: Path | None = None
    summary_table: Callable[[Sequence[Any]], str] | None = None

    def __post_init__(self) -> None:
        names = [s.name for s in self.systems]
        if len(set(names)) != len(names):
            raise ValueError(f"case {self.name!r}: system names repeat: {names}")
        if self.baseline not in names:
            raise ValueError(f"case {self.name!r}: baseline {self.baseline!r} not in {names}")

    @property
    def system_names(self) -> list[str]:
        return [s.name for s in self.systems]

    def system(self, name: str) -> System:
        for system in self.systems:
            if system.name == name:
                return system
        raise UsageError(
            f"case {self.name!r} has no system {name!r}",
            hint=f"its systems: {', '.join(self.system_names)}",
        )


def cases_dir_or_error(cases_dir: Path) -> Path:
    if not cases_dir.is_dir():
        raise UsageError(f"benchmark cases folder {str(cases_dir)!r} not found", hint=CASES_HINT)
    return cases_dir


def case_names(cases_dir: Path) -> list[str]:
    """The cases in `cases_dir`: each `*.py` not starting with `_` that looks like a case.

    Loading a case runs its file, so files that do not even mention `CASE` and `child_main`
    (a helper, or a folder that is not a cases folder at all) are left alone, not imported.
    """
    cases_dir_or_error(cases_dir)
    return sorted(
        path.stem
        for path in cases_dir.glob("*.py")
        if not path.name.startswith("_") and _looks_like_case(path)
    )


def _looks_like_case(path: Path) -> bool:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    return "CASE" in text and "child_main" in text


def load_case(cases_dir: Path, name: str) -> Case:
    """Import `<cases_dir>/<name>.py` and return its `CASE`, with `path` filled in."""
    known = case_names(cases_dir)
    if name not in known:
        raise UsageError(
            f"unknown benchmark case {name!r}",
            hint=f"known cases: {', '.join(known) or 'none'} (see `rlsys bench list`)",
        )
    path = (cases_dir / f"{name}.py").resolve()
    module_name = f"_rlsys_bench_case_{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up while importing
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        sys.modules.pop(module_name, None)
        raise UsageError(
            f"could not load benchmark case {str(path)!r}: {type(err).__name__}: {err}",
            hint=f"run `python {path} --help` to see the full error",
        ) from err
    case = getattr(module, "CASE", None)
    if not isinstance(case, Case):
        raise UsageError(
            f"{str(path)!r} defines no `CASE = rlsys.bench.Case(...)`",
            hint="see benchmarks/README.md for the layout of a case file",
        )
    if case.name != name:
        raise UsageError(f"{str(path)!r} defines case {case.name!r}; rename one to match")
    return replace(case, path=path)
