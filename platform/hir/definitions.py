"""The Dagster code location: every asset and check in ``hir.assets``, jobs, schedules, sensors, resources."""

from __future__ import annotations

import dagster as dg

import hir.assets
from hir.automation import daily_refresh, inbox_sensor, with_automation
from hir.jobs import build_jobs
from hir.resources import build_resources
from hir.settings import Settings


def build_definitions(settings: Settings | None = None, loggers: dict | None = None) -> dg.Definitions:
    settings = settings or Settings.from_env()
    jobs = build_jobs(settings)
    return dg.Definitions(
        loggers=loggers,
        assets=with_automation(list(dg.load_assets_from_package_module(hir.assets))),
        asset_checks=dg.load_asset_checks_from_package_module(hir.assets),
        jobs=jobs,
        schedules=[daily_refresh(next(j for j in jobs if j.name == "hir_job"))],
        sensors=[inbox_sensor],
        resources=build_resources(settings),
    )


defs = build_definitions()
