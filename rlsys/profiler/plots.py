"""Plots beyond the breakdown bars, and embedding figures in a self-contained page.

Figures are matplotlib (Agg), drawn from the JSON-ready summary dict so that `rlsys report`
redraws them. The caller of a `*_figure` function saves and closes the figure.
"""

from __future__ import annotations

import base64
import io
from typing import Any


def png_data_uri(figure: Any, dpi: int = 100) -> str:
    """The figure as a `data:image/png;base64,...` URI (closes it): no file, no network."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, format="png", dpi=dpi)
    finally:
        plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
