"""Automation: the daily refresh schedule, the inbox sensor and declarative conditions.

* ``daily_refresh`` runs ``hir_job`` once a day for the partition that just closed (yesterday,
  UTC), so every scheduled run sees a complete day and nothing after its cut-off.
* ``inbox_sensor`` watches ``<data home>/inbox/``: each new file (``inbox/<kind>/<file>`` for a
  source kind, or ``inbox/<file>`` for the configured ``HIR_SOURCE``) becomes one ingest run; the
  cursor remembers the files' sha256, so the same bytes dropped again request nothing.
* Every asset downstream of ingest carries ``AutomationCondition.eager()``: when its parents
  update, it follows (for partitioned assets, in the newest day), which is how an inbox ingest
  triggers the refresh.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import dagster as dg

from hir.graph.sources import SOURCE_MODULES
from hir.resources import SettingsResource

# Ingest is driven by the schedule and the sensor; everything after it follows its parents.
FOLLOWING = dg.AutomationCondition.eager()
MAX_REMEMBERED = 10_000


def with_automation(assets: list, root_groups: tuple[str, ...] = ("ingest",)) -> list:
    """Give every asset outside ``root_groups`` the eager automation condition."""

    def follow(spec: dg.AssetSpec) -> dg.AssetSpec:
        if spec.group_name in root_groups or spec.automation_condition is not None:
            return spec
        return spec.replace_attributes(automation_condition=FOLLOWING)

    return [a.map_asset_specs(follow) if isinstance(a, dg.AssetsDefinition) else a for a in assets]


def daily_refresh(job) -> dg.ScheduleDefinition:
    return dg.build_schedule_from_partitioned_job(
        job,
        name="daily_refresh",
        description="Refresh the newest complete day end to end, an hour after midnight UTC.",
        hour_of_day=1,
        minute_of_hour=0,
        tags={"hir/trigger": "schedule"},
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def inbox_files(inbox: Path, default_kind: str) -> list[tuple[str, Path]]:
    """``(source kind, file)`` for every visible file in the inbox, oldest name first."""
    if not inbox.exists():
        return []
    found = []
    for path in sorted(inbox.rglob("*")):
        if not path.is_file() or path.name.startswith("."):
            continue
        rel = path.relative_to(inbox)
        kind = rel.parts[0] if len(rel.parts) > 1 and rel.parts[0] in SOURCE_MODULES else default_kind
        found.append((kind, path))
    return found


@dg.sensor(
    name="inbox_sensor",
    job_name="ingest_job",
    minimum_interval_seconds=30,
    description="Ingest event files dropped into <data home>/inbox/ (once per distinct file content).",
)
def inbox_sensor(context: dg.SensorEvaluationContext, hir_settings: SettingsResource):
    settings = hir_settings.get()
    seen: list[str] = json.loads(context.cursor) if context.cursor else []
    known = set(seen)
    requests = []
    # The synthetic source has no files; files dropped beside it are read as `csv`.
    default_kind = "csv" if settings.source == "synthetic" else settings.source
    for kind, path in inbox_files(settings.inbox_dir, default_kind):
        digest = _sha256(path)
        if digest in known:
            continue
        known.add(digest)
        seen.append(digest)
        requests.append(
            dg.RunRequest(
                run_key=f"inbox-{digest}",
                run_config={"ops": {"ingest": {"config": {"source": kind, "paths": [str(path)]}}}},
                tags={"hir/trigger": "inbox", "hir/file": path.name},
            )
        )
    context.update_cursor(json.dumps(seen[-MAX_REMEMBERED:]))
    if not requests:
        return dg.SkipReason(f"no new files in {settings.inbox_dir}")
    return requests
