"""Source adapters: each reads one kind of input into a :class:`~hir.graph.sources.base.SourceBatch`.

``read_source(kind, path, settings)`` dispatches by kind; each adapter module exposes
``read(path: Path | None, settings: Settings) -> SourceBatch`` and is imported only when used.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from hir.errors import SourceError
from hir.graph.sources.base import SourceBatch
from hir.settings import Settings

SOURCE_MODULES = {
    "synthetic": "hir.graph.sources.synthetic",
    "taobao_userbehavior": "hir.graph.sources.taobao_userbehavior",
    "taobao_ads": "hir.graph.sources.taobao_ads",
    "movielens": "hir.graph.sources.movielens",
    "amazon_seq": "hir.graph.sources.amazon_seq",
    "csv": "hir.graph.sources.csv_mapped",
}


def read_source(kind: str, path: str | Path | None, settings: Settings) -> SourceBatch:
    """Read a source of ``kind`` at ``path`` (None for ``synthetic``) into canonical records."""
    if kind not in SOURCE_MODULES:
        raise SourceError(f"unknown source kind {kind!r}; choose one of {', '.join(SOURCE_MODULES)}")
    if kind != "synthetic" and not path:
        raise SourceError(f"source {kind!r} needs a path (HIR_SOURCE_PATH or --path)")
    module = importlib.import_module(SOURCE_MODULES[kind])
    batch = module.read(Path(path) if path else None, settings)
    batch.check_accounting()
    return batch


__all__ = ["SOURCE_MODULES", "SourceBatch", "SourceError", "read_source"]
