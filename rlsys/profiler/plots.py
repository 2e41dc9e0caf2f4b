"""Plots beyond the breakdown bars, and embedding figures in a self-contained page.

Figures are matplotlib (Agg), drawn from the JSON-ready summary dict so that `rlsys report`
redraws them. The caller of a `*_figure` function saves and closes the figure.
"""

from __future__ import annotations

import base64
import io
import os
from typing import Any

from rlsys.profiler.atomic import replacing


def save_and_close(figure: Any, target: Any, dpi: int = 100) -> None:
    """Save the figure as PNG to `target` (a path, written atomically, or a binary file),
    then close it."""
    import matplotlib.pyplot as plt

    try:
        if isinstance(target, (str, os.PathLike)):
            with replacing(target) as temporary:
                figure.savefig(temporary, format="png", dpi=dpi)
        else:
            figure.savefig(target, format="png", dpi=dpi)
    finally:
        plt.close(figure)


def png_data_uri(figure: Any, dpi: int = 100) -> str:
    """The figure as a `data:image/png;base64,...` URI (closes it): no file, no network."""
    buffer = io.BytesIO()
    save_and_close(figure, buffer, dpi)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def gpu_figure(section: dict[str, Any]) -> Any:
    """Per device: true busy percent and NVML's polled percent over time (summary "gpu")."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = section["devices"]
    figure, axes = plt.subplots(len(rows), 1, figsize=(8.0, 2.6 * len(rows) + 0.6),
                                squeeze=False)  # fmt: skip
    for ax, row in zip(axes[:, 0], rows, strict=True):
        line = row["timeline"]
        ax.step(line["seconds"], line["busy_percent"], where="pre", color="#c44e52",
                label=f"busy (kernels), mean {row['busy_percent']:.0f}%")  # fmt: skip
        if row["polled_percent"] is not None:
            polled = [float("nan") if p is None else p for p in line["polled_percent"]]
            ax.step(line["seconds"], polled, where="pre", color="#4c72b0",
                    label=f"polled (NVML), mean {row['polled_percent']:.0f}%")  # fmt: skip
        ax.set_ylim(0, 105)
        ax.set_ylabel("%")
        ax.set_title(f"{row['device']}: GPU busy vs polled utilization", fontsize=10)
        ax.legend(fontsize=8, loc="lower right")
    axes[-1, 0].set_xlabel("seconds since the first event")
    figure.tight_layout()
    return figure
