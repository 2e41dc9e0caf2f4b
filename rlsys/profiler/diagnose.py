"""Why a profiled command recorded nothing: one error line and a hint that says what to do.

Only Python processes record (the bootstrap on PYTHONPATH starts recording as Python starts),
so a command that is not Python (`ls`, a compiled program, a shell script that runs no
Python) leaves the trace folder empty, and so does a Python that cannot import rlsys.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path


def interpreter(command: list[str]) -> str | None:
    """The program that runs `command`: the name in a script's `#!` line (through `env`), or
    None for a program that is not a script (or cannot be read)."""
    path = shutil.which(command[0])
    try:
        with open(path or command[0], "rb") as f:
            first = f.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    return Path(words[0]).name if words else None


def nothing_recorded(command: list[str]) -> tuple[str, str]:
    """(error, hint) for a command that ran and left no recording."""
    shown = shlex.join(command[:1])
    name = Path(command[0]).name
    if name.startswith("python"):
        return (f"nothing recorded: {shown} could not import rlsys, so it was not profiled",
                f"run the command with a Python that has rlsys installed (e.g. "
                f"`rlsys profile -- {sys.executable} train.py`)")  # fmt: skip
    runner = interpreter(command)
    example = "e.g. `rlsys profile -- python train.py`"
    if runner is not None and runner.startswith("python"):
        return (f"nothing recorded: {shown} runs {runner}, which could not import rlsys",
                f"run the script with a Python that has rlsys installed (e.g. "
                f"`rlsys profile -- {sys.executable} {command[0]}`)")  # fmt: skip
    if runner is not None:
        return (f"nothing recorded: {shown} is a {runner} script, and no Python process it "
                "started recorded anything; rlsys profile records Python processes only",
                f"profile the Python command the script runs ({example}); a Python it starts "
                "is recorded only if it can import rlsys")  # fmt: skip
    return (f"nothing recorded: {shown} is not a Python program; rlsys profile records "
            "Python processes only", f"profile a Python command, {example}")  # fmt: skip
