"""Markdown tables for asset metadata and reports, rendered one way everywhere.

Dagster shows ``MetadataValue.md`` in the UI; a cell holding ``|`` or a line break would split its
row, so every cell is escaped here rather than at each caller.
"""

from __future__ import annotations

import numbers
from typing import Any, Iterable, Mapping, Sequence

_MISSING = "-"


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[Any]],
                   formats: Mapping[str, str] | None = None, empty: str | None = None) -> str:
    """A GitHub-flavoured Markdown table, lines joined by ``\\n`` without a trailing one.

    Args:
        columns: the header cells, in order.
        rows: one sequence of values per row, aligned with ``columns``.
        formats: ``{column: format spec}`` (``".4f"``, ``","``, ``"+.2%"``) applied to the numbers
            of that column; other values (text already formatted by the caller) are kept as they are.
        empty: what to return instead when there are no rows; by default the header alone.

    A ``None`` cell reads ``-``; ``|`` in a cell is escaped and a line break becomes a space.
    """
    formats = formats or {}
    specs = [formats.get(c) for c in columns]
    body = [_row(_cell(v, spec) for v, spec in zip(row, specs)) for row in rows]
    if not body and empty is not None:
        return empty
    return "\n".join([_row(_cell(c, None) for c in columns), "|" + "---|" * len(columns), *body])


def _cell(value: Any, spec: str | None) -> str:
    if value is None:
        return _MISSING
    text = format(value, spec) if spec and isinstance(value, numbers.Real) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"
