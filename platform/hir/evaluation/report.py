"""The evaluation report: Markdown sections, inline PNG figures and the run's settings."""

from __future__ import annotations

import base64
import json

from hir.plots import png_bytes


def build_report(title: str, sections: dict[str, str], figures: dict, run: dict) -> str:
    """One Markdown document.

    Args:
        title: the top heading; sections: ``{heading: markdown}`` in order;
        figures: ``{caption: matplotlib Figure}`` embedded as PNG ``data:`` URIs (closed here);
        run: the run's partition, protocol, settings and seed, printed as JSON.
    """
    parts = [f"# {title}", ""]
    for heading, body in sections.items():
        parts += [f"## {heading}", "", body, ""]
    parts += ["## Figures", ""]
    for caption, fig in figures.items():
        encoded = base64.b64encode(png_bytes(fig)).decode("ascii")
        parts += [f"### {caption}", "", f"![{caption}](data:image/png;base64,{encoded})", ""]
    parts += ["## Run", "", "```json", json.dumps(run, indent=2, default=str), "```", ""]
    return "\n".join(parts)
