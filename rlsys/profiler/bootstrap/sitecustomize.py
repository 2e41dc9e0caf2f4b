"""Bootstrap of `rlsys profile`: Python imports this at startup in the profiled command.

`rlsys profile` runs its command with this directory first on PYTHONPATH and RLSYS_TRACE_DIR
set, so every Python process of the command (the script and any child that inherits the
environment: multiprocessing spawn/forkserver workers, subprocesses) imports this module
before its own code. It

1. runs the `sitecustomize` that this one shadows, if the interpreter has one;
2. imports `rlsys.profiler.hooks`, which imports `rlsys.trace`, whose import starts recording
   into RLSYS_TRACE_DIR (`<dir>/<pid>.jsonl`, closed at exit);
3. installs the automatic operations and C-call collectors (`hooks.install()`:
   import-triggered patches of gymnasium, Stable-Baselines3, envpool, torch and JAX; nothing
   of them is imported here), recording the sources RLSYS_PROFILE_SOURCES names (default
   all; `rlsys.profiler.sources`);
4. where `rlsys profile` found a GPU, starts GPU tracing when torch or jax is imported
   (`rlsys.profiler.collectors.gpu_tracing`).

If the interpreter cannot import rlsys from its own path, the rlsys this file belongs to is
appended to `sys.path`. Nothing here may stop the program: any failure prints one warning to
stderr and the program runs unprofiled; a Ctrl-C here ends it as it would end the program.
"""


def _bootstrap() -> None:
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        shadowed = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
        if shadowed is not None and shadowed.loader is not None:
            shadowed.loader.exec_module(importlib.util.module_from_spec(shadowed))
    except Exception as err:
        print(f"rlsys profile: the interpreter's own sitecustomize failed: {err!r}",
              file=sys.stderr)  # fmt: skip
    try:
        try:
            from rlsys.profiler import hooks, sources
        except ImportError:
            sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(here))))
            from rlsys.profiler import hooks, sources
        sources.install_test_event_cost()
        hooks.install(sources.enabled())
        from rlsys.profiler.collectors import gpu_tracing

        gpu_tracing.install()  # a no-op unless `rlsys profile` found a GPU
    except Exception as err:
        print(f"rlsys profile: not profiling this process ({err!r})", file=sys.stderr)


def _interrupted() -> None:
    """Ctrl-C while the bootstrap imports (the first tenth of a second): raised out of
    sitecustomize, Python ends with "Fatal Python error: init_import_site" and a dump of the
    import stack. End as a Python program interrupted by SIGINT does (exit code 130)."""
    import os
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(128 + signal.SIGINT)  # were the signal not delivered at once


try:
    _bootstrap()
except KeyboardInterrupt:
    _interrupted()
del _bootstrap, _interrupted
