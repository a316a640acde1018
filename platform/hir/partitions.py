"""Daily partitions: partition D means cut-off T = end of day D (UTC)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import dagster as dg

from hir.settings import Settings


def daily_partitions(settings: Settings | None = None) -> dg.DailyPartitionsDefinition:
    settings = settings or Settings.from_env()
    return dg.DailyPartitionsDefinition(start_date=settings.partition_start_date, timezone="UTC")


def cutoff_of(partition_key: str) -> datetime:
    """The cut-off of a partition: midnight UTC after day ``partition_key`` (``YYYY-MM-DD``)."""
    day = datetime.strptime(partition_key, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    return day + timedelta(days=1)
