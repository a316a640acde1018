"""Figures for asset metadata: a matplotlib figure becomes Markdown with an embedded PNG.

Dagster shows ``MetadataValue.md`` in the UI; a ``data:`` URI keeps the image inside the run's
event log, so it survives the artefact folder being replaced.
"""

from __future__ import annotations

import base64
import io

import dagster as dg


def png_bytes(fig, dpi: int = 80) -> bytes:
    """Render ``fig`` (a matplotlib Figure) to PNG bytes at ``dpi`` and close it."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(fig)
    return buffer.getvalue()


def png_markdown(fig, title: str = "", dpi: int = 80) -> dg.MetadataValue:
    """``fig`` as a Markdown metadata value holding the PNG inline; ``title`` is the alt text."""
    encoded = base64.b64encode(png_bytes(fig, dpi=dpi)).decode("ascii")
    return dg.MetadataValue.md(f"![{title}](data:image/png;base64,{encoded})")


def figure(width: float = 5.0, height: float = 3.0, nrows: int = 1, ncols: int = 1):
    """A new headless (Agg) figure of ``width`` x ``height`` inches and its ``nrows`` x ``ncols`` axes."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=(width, height))
