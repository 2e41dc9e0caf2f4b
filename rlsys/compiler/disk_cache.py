"""Compiled programs kept on disk, so that running the same program again skips XLA.

`rlsys train` and `rlsys eval` turn this on (`--compile-cache DIR`, default
`~/.cache/rlsys/jax`, or under $XDG_CACHE_HOME; `--no-compile-cache` turns it off). It is
JAX's persistent compilation cache: each jitted function's executable is stored under a key
of its HLO, the compile options, the XLA flags and the jax/jaxlib versions, so a changed
program, option or version compiles afresh and never reads a stale entry. A repeated run of
one configuration or a resumed run then builds and traces as before but loads instead of
compiling. PPO on gymnax CartPole, 2 cores: 3.3 s of compilation in the first run, 1.1 s in
the next (1.3 s with another seed: the parts whose constants the seed changes compile
again), and a peak RSS of 321 MB instead of 569, since XLA's compiler never runs.

Library calls (`program.compile(...)`, the benchmarks) do not use it unless asked: they
measure and pay a cold compilation.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def default_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rlsys" / "jax"


@contextlib.contextmanager
def disk_cache(directory: Path | None) -> Iterator[None]:
    """Keep the executables compiled inside the block in `directory` (None: keep none), then
    restore JAX's settings: a caller in the same process compiles as it did before."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    before = {name: getattr(jax.config, name) for name in names}
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
    try:
        jax.config.update(names[0], None if directory is None else str(directory))
        # Every compilation, however short: a program's small ones add up to about a second.
        jax.config.update(names[1], 0.0)
        compilation_cache.reset_cache()  # JAX decides once whether a cache is used, until reset
        yield
    finally:
        for name, value in before.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()  # and decides again with the restored settings
