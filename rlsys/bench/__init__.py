"""Benchmark harness: cases of several systems, each run in its own measured process.

A case file (`benchmarks/cases/<name>.py`) declares `CASE = Case(...)` and ends with
`if __name__ == "__main__": child_main(CASE)`; each system's function does its work and calls
`report(env_steps=..., seconds=..., **metrics)`. `rlsys bench run <name>` does the rest.

Imports only the standard library, psutil, rich and rlsys.errors / rlsys.trace: case files
import this package in the runner too, where jax must not be loaded.
"""

from rlsys.bench.case import Case, System, installed
from rlsys.bench.child import child_main, report

__all__ = ["Case", "System", "child_main", "installed", "report"]
