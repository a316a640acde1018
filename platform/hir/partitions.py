"""Daily partitions: partition D means cut-off T = end of day D (UTC).

The first day depends on the settings (each source's data starts elsewhere), and the settings are
known only when the definitions are built, not when ``hir.assets`` is imported. So every asset
module declares :data:`DAILY`, and :func:`with_daily_partitions` gives each of those assets the
settings' own :func:`daily_partitions` inside ``build_definitions``: the asset graph, the jobs and
the schedule always agree, whatever the environment held when the modules were imported.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import dagster as dg

from hir.settings import Settings

# What asset modules declare; replaced by the settings' partitions when the definitions are built.
DAILY = dg.DailyPartitionsDefinition(start_date="2000-01-01", timezone="UTC")


def daily_partitions(settings: Settings) -> dg.DailyPartitionsDefinition:
    return dg.DailyPartitionsDefinition(start_date=settings.partition_start_date, timezone="UTC")


def with_daily_partitions(assets: list, partitions: dg.DailyPartitionsDefinition) -> list:
    """``assets`` with every asset declared on :data:`DAILY` moved onto ``partitions``."""

    def repartition(spec: dg.AssetSpec) -> dg.AssetSpec:
        return spec.replace_attributes(partitions_def=partitions) if spec.partitions_def == DAILY else spec

    return [a.map_asset_specs(repartition) if isinstance(a, dg.AssetsDefinition) else a for a in assets]


def cutoff_of(partition_key: str) -> datetime:
    """The cut-off of a partition: midnight UTC after day ``partition_key`` (``YYYY-MM-DD``)."""
    day = datetime.strptime(partition_key, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    return day + timedelta(days=1)
