"""Jobs: ``ingest_job`` (unpartitioned inputs) and ``hir_job`` (everything, for one daily partition)."""

from __future__ import annotations

import dagster as dg

from hir.errors import SettingsError
from hir.partitions import daily_partitions
from hir.settings import Settings

UNPARTITIONED_GROUPS = ("ingest", "world_knowledge")
# Steps can fail for passing reasons (a locked file, a busy feature store): retry with back-off.
RETRY = dg.RetryPolicy(max_retries=2, delay=5, backoff=dg.Backoff.EXPONENTIAL)


def hir_executor(settings: Settings) -> dg.ExecutorDefinition:
    """The executor of ``hir_job`` named by the ``executor`` setting.

    ``multi_or_in_process`` is Dagster's default; ``k8s`` runs each step as a Kubernetes Job
    (``dagster_k8s.k8s_job_executor``; run config ``platform/deploy/k8s-executor.yaml``), imported
    only then so the default install needs no Kubernetes client. Raises ``SettingsError`` for
    another name or when the ``k8s`` extra is missing.
    """
    if settings.executor == "multi_or_in_process":
        return dg.multi_or_in_process_executor
    if settings.executor != "k8s":
        raise SettingsError(f"HIR_EXECUTOR={settings.executor!r}: expected multi_or_in_process or k8s")
    try:
        from dagster_k8s import k8s_job_executor
    except ImportError:
        raise SettingsError("HIR_EXECUTOR=k8s needs the k8s extra: pip install 'hir[k8s]'") from None
    return k8s_job_executor


def build_jobs(settings: Settings) -> list[dg.UnresolvedAssetJobDefinition]:
    inputs = dg.AssetSelection.groups(*UNPARTITIONED_GROUPS)
    return [
        dg.define_asset_job(
            "ingest_job",
            selection=inputs,
            description="Read the configured source into the warehouse and embed new content.",
            tags={"hir/kind": "ingest"},
            op_retry_policy=RETRY,
        ),
        dg.define_asset_job(
            "hir_job",
            selection=dg.AssetSelection.all(),
            partitions_def=daily_partitions(settings),
            description="The whole pipeline for one daily partition (cut-off = end of that day).",
            tags={"hir/kind": "full"},
            op_retry_policy=RETRY,
            executor_def=hir_executor(settings),
        ),
    ]
