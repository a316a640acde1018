"""The fused world-knowledge vectors as a training run reads them: ``world_knowledge.parquet``
(written by the ``world_knowledge`` asset from :func:`hir.world_knowledge.store.fuse`) laid out
in a snapshot's node order."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def read_world_knowledge(path: str | Path, entity_id: torch.Tensor) -> torch.Tensor | None:
    """Per-node world knowledge ``[N, d]`` from ``world_knowledge.parquet`` (zero rows where an
    entity has none); ``None`` when the file is absent or empty.

    Args:
        path: the Parquet file (``entity_id``, ``vector`` fixed-size list of float32, …).
        entity_id: ``[N]`` the snapshot's entity ids, sorted ascending (node order).
    """
    import numpy as np
    import pyarrow.parquet as pq
    import torch

    path = Path(path)
    if not path.exists():
        return None
    table = pq.read_table(path, columns=["entity_id", "vector"])
    if table.num_rows == 0:
        return None
    ids = torch.from_numpy(table.column("entity_id").to_numpy().astype(np.int64))
    vectors = table.column("vector").combine_chunks()
    width = vectors.type.list_size
    flat = torch.from_numpy(vectors.values.to_numpy(zero_copy_only=False).astype(np.float32)).view(-1, width)
    out = torch.zeros(entity_id.numel(), width)
    pos = torch.searchsorted(entity_id, ids).clamp_max(max(entity_id.numel() - 1, 0))
    found = entity_id[pos] == ids if entity_id.numel() else torch.zeros_like(ids, dtype=torch.bool)
    out[pos[found]] = flat[found]
    return out
