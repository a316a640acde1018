"""Dagster resources: the DuckDB warehouse, the artefact store and the torch runtime.

Each resource is configured from :class:`~hir.settings.Settings` by :func:`build_resources`;
heavy libraries are imported inside methods so the code location loads fast.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Iterator

import dagster as dg

from hir.settings import Settings
from hir.storage import Artifacts, atomic_dir
from hir.world_knowledge.embedders import ImageEmbedder, TextEmbedder


class SettingsResource(dg.ConfigurableResource):
    """The platform settings (:class:`~hir.settings.Settings`) as the ``hir_settings`` resource.

    ``values`` holds ``HIR_*`` values, e.g. ``{"HIR_TRAIN_STEPS": "500"}``; a setting not named takes
    its default. :func:`build_resources` fills it from the settings the process started with, so
    the UI's resource page shows what a run uses and the launchpad can override any of it.
    """

    values: dict[str, str] = {}  # not "env": Dagster reads a lone {"env": …} as an environment variable

    def get(self) -> Settings:
        return _parsed(tuple(sorted(self.values.items())))


@functools.lru_cache(maxsize=8)
def _parsed(items: tuple[tuple[str, str], ...]) -> Settings:
    return Settings.from_mapping(dict(items))


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
    """Files under ``<data home>/artifacts/<asset>/<partition>/``, each partition written atomically.

    Where each artefact lives is :class:`~hir.storage.Artifacts`' (``catalogue``); this resource
    adds the atomic partition writes a Dagster step needs.
    """

    root: str

    @property
    def catalogue(self) -> Artifacts:
        return Artifacts(self.root)

    def path(self, asset: str, partition: str | None = None) -> Path:
        """The folder of one partition of ``asset`` (see :meth:`~hir.storage.Artifacts.folder`)."""
        return self.catalogue.folder(asset, partition)

    @contextlib.contextmanager
    def write_partition(self, asset: str, partition: str | None = None) -> Iterator[Path]:
        """Yield a scratch folder that replaces ``path(asset, partition)`` whole on success."""
        with atomic_dir(self.path(asset, partition)) as tmp:
            yield tmp

    def partitions(self, asset: str) -> list[str]:
        """Partitions of ``asset`` written so far, oldest first."""
        return self.catalogue.partitions(asset)


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
        "hir_settings": SettingsResource(values=settings.as_env()),
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
