"""Jobs: ``ingest_job`` (unpartitioned inputs) and ``hir_job`` (everything, for one daily partition)."""

from __future__ import annotations

import dagster as dg

from hir.partitions import daily_partitions
from hir.settings import Settings

UNPARTITIONED_GROUPS = ("ingest", "world_knowledge")
# Steps can fail for passing reasons (a locked file, a busy feature store): retry with back-off.
RETRY = dg.RetryPolicy(max_retries=2, delay=5, backoff=dg.Backoff.EXPONENTIAL)


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
        ),
    ]
