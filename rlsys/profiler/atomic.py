"""Result files written whole or not at all.

Each file is written to a temporary file in the same folder and renamed over its name
(`os.replace`, atomic on one file system), so that a reader, or a profile interrupted while
it writes (Ctrl-C, SIGTERM, a full disk), never sees a cut file: only the old one, the new
one, or none. The temporary file is removed when the writing fails.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yields the temporary path to write; on success it becomes `path`. An OSError names
    `path`, not the temporary file, which the user never sees."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield temporary
        os.replace(temporary, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            temporary.unlink()
        if isinstance(err, OSError) and err.errno is not None:
            raise OSError(err.errno, err.strerror, str(path)) from None
        raise


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """`path.write_text(text)` (UTF-8), atomically."""
    with replacing(path) as temporary:
        temporary.write_text(text, encoding="utf-8")
    return Path(path)
