"""Dagster resources: the DuckDB warehouse, the artefact store and the torch runtime.

Each resource is configured from :class:`~hir.settings.Settings` by :func:`build_resources`;
heavy libraries are imported inside methods so the code location loads fast.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import dagster as dg

from hir.settings import Settings
from hir.storage import atomic_dir
from hir.world_knowledge.embedders import ImageEmbedder, TextEmbedder


class Warehouse(dg.ConfigurableResource):
    """The DuckDB file holding the canonical tables (DESIGN §3)."""

    path: str
    threads: int = 2

    @contextlib.contextmanager
    def connect(self, read_only: bool = False) -> Iterator["duckdb.DuckDBPyConnection"]:  # noqa: F821
        from hir.graph.warehouse import connect

        with connect(self.path, read_only=read_only, threads=self.threads) as con:
            yield con


class ArtifactStore(dg.ConfigurableResource):
    """Files under ``<data home>/artifacts/<asset>/<partition>/``, each partition written atomically."""

    root: str

    def path(self, asset: str, partition: str | None = None) -> Path:
        base = Path(self.root) / asset
        return base / partition if partition else base / "_all"

    @contextlib.contextmanager
    def write_partition(self, asset: str, partition: str | None = None) -> Iterator[Path]:
        """Yield a scratch folder that replaces ``path(asset, partition)`` whole on success."""
        with atomic_dir(self.path(asset, partition)) as tmp:
            yield tmp

    def partitions(self, asset: str) -> list[str]:
        """Partitions of ``asset`` written so far, oldest first."""
        base = Path(self.root) / asset
        if not base.exists():
            return []
        return sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


class TorchRuntime(dg.ConfigurableResource):
    """Where and how torch runs: ``device`` ("auto", "cpu", "cuda") and intra-op threads."""

    device: str = "auto"
    threads: int = 2

    def setup(self) -> "torch.device":  # noqa: F821
        import torch

        torch.set_num_threads(self.threads)
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)


def build_resources(settings: Settings) -> dict[str, dg.ConfigurableResource]:
    from hir.serving.feast_store import FeastStore

    return {
        "feast": FeastStore.from_settings(settings),
        "warehouse": Warehouse(path=str(settings.warehouse_path), threads=settings.threads),
        "artifacts": ArtifactStore(root=str(settings.artifacts_dir)),
        "torch_runtime": TorchRuntime(device=settings.device, threads=settings.threads),
        "text_embedder": TextEmbedder(
            model=settings.text_model, batch_size=settings.text_batch_size, device=settings.embed_device
        ),
        "image_embedder": ImageEmbedder(
            model=settings.image_model,
            checkpoint=settings.image_checkpoint,
            pretrained=settings.image_pretrained,
            batch_size=settings.image_batch_size,
            device=settings.embed_device,
            base_dir=str(settings.data_home),
        ),
    }
