"""What machine a recording or a measurement was made on."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str | None:
    """The CPU's model name (Linux's /proc/cpuinfo), else what `platform` knows, else None."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None
