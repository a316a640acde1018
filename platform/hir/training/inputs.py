"""What a partition's training run reads and where it checkpoints, shared by the ``hir_encoder``
asset and the ``torchrun`` entry point so that either can finish what the other started."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hir.errors import SourceError
from hir.settings import Settings
from hir.storage import META_FILE, Artifacts
from hir.training.configs import TrainingConfigs, training_configs


@dataclass
class TrainingRun:
    """One partition's training inputs.

    Attributes:
        graph: the partition's snapshot (``TemporalGraph``).
        wk: per-node world knowledge ``[N, d]`` or None.
        configs: train, encoder and sampler configs from the settings.
        work: the checkpoint folder the run writes and resumes from; the asset publishes it.
        warm_start: the earlier partition's checkpoint folder it fine-tunes from ("" for scratch).
    """

    graph: Any
    wk: Any
    configs: TrainingConfigs
    work: Path
    warm_start: str


def previous_checkpoint(settings: Settings, partition: str) -> str:
    """The newest earlier partition of ``hir_encoder`` holding a checkpoint, or ""."""
    catalogue = Artifacts(settings.artifacts_dir)
    for name in reversed([p for p in catalogue.partitions("hir_encoder") if p < partition]):
        folder = catalogue.encoder_dir(name)
        if (folder / "state.json").exists():
            return str(folder)
    return ""


def load_partition_graph(settings: Settings, partition: str):
    """The partition's snapshot as a ``TemporalGraph``, or a clear error when it is missing."""
    from hir.models.graph import load_snapshot

    folder = Artifacts(settings.artifacts_dir).snapshot_dir(partition)
    if not (folder / META_FILE).exists():
        raise SourceError(f"graph_snapshot {partition} is missing at {folder}; materialise it first")
    return load_snapshot(folder)


def load_world_knowledge(settings: Settings, graph):
    """Per-node world knowledge ``[N, d]`` of ``graph``'s entities, or None where there is none."""
    from hir.world_knowledge.vectors import read_world_knowledge

    return read_world_knowledge(Artifacts(settings.artifacts_dir).world_knowledge(), graph.entity_id)


def training_run(settings: Settings, partition: str, device_type: str) -> TrainingRun:
    """The snapshot, world knowledge, configs and checkpoint folders of ``partition``'s run."""
    graph = load_partition_graph(settings, partition)
    wk = load_world_knowledge(settings, graph)
    warm = previous_checkpoint(settings, partition) if settings.warm_start else ""
    configs = training_configs(settings, graph, wk_dim=0 if wk is None else int(wk.shape[1]),
                               device_type=device_type, warm_start=warm)
    return TrainingRun(graph, wk, configs, Artifacts(settings.artifacts_dir).encoder_work_dir(partition), warm)
