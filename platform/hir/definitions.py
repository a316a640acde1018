"""The Dagster code location: every asset and check in ``hir.assets``, jobs, schedules, sensors, resources."""

from __future__ import annotations

import dagster as dg

import hir.assets
from hir.automation import daily_refresh, inbox_sensor, with_automation
from hir.jobs import build_jobs
from hir.partitions import daily_partitions, with_daily_partitions
from hir.resources import build_resources
from hir.settings import Settings


def build_definitions(settings: Settings, loggers: dict | None = None) -> dg.Definitions:
    jobs = build_jobs(settings)
    assets = with_daily_partitions(list(dg.load_assets_from_package_module(hir.assets)), daily_partitions(settings))
    return dg.Definitions(
        loggers=loggers,
        assets=with_automation(assets),
        asset_checks=dg.load_asset_checks_from_package_module(hir.assets),
        jobs=jobs,
        schedules=[daily_refresh(next(j for j in jobs if j.name == "hir_job"))],
        sensors=[inbox_sensor],
        resources=build_resources(settings),
    )


# `dagster dev` and the code server start here: the one read of the environment in that process.
defs = build_definitions(Settings.from_env())
