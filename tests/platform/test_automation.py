"""Schedule, inbox sensor and declarative automation behave as a user relies on."""

from datetime import datetime, timezone

import dagster as dg
from hir.definitions import build_definitions


def test_schedule_targets_the_day_that_just_closed(settings):
    defs = build_definitions(settings)
    schedule = defs.get_schedule_def("daily_refresh")
    with dg.instance_for_test() as instance:
        tick = datetime(2026, 1, 29, 1, 0, tzinfo=timezone.utc)
        ctx = dg.build_schedule_context(instance=instance, scheduled_execution_time=tick)
        requests = schedule.evaluate_tick(ctx).run_requests
    assert [r.partition_key for r in requests] == ["2026-01-28"]
    assert requests[0].tags["hir/trigger"] == "schedule"


def _evaluate_sensor(defs, instance, cursor):
    """One tick, with the definitions' resources as the daemon gives them."""
    sensor = defs.get_sensor_def("inbox_sensor")
    resources = {key: defs.resources[key] for key in sensor.required_resource_keys}
    ctx = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs, resources=resources)
    result = sensor.evaluate_tick(ctx)
    return result.run_requests or [], result.cursor


def test_inbox_file_requests_exactly_one_run_once(settings):
    defs = build_definitions(settings)
    inbox = settings.inbox_dir
    (inbox / "movielens").mkdir(parents=True)
    with dg.instance_for_test() as instance:
        requests, cursor = _evaluate_sensor(defs, instance, None)
        assert requests == []
        (inbox / "movielens" / "ratings.csv").write_text("userId,movieId,rating,timestamp\n1,1,4.0,964982703\n")
        requests, cursor = _evaluate_sensor(defs, instance, cursor)
        assert len(requests) == 1
        config = requests[0].run_config["ops"]["ingest"]["config"]
        assert config == {"source": "movielens", "paths": [str(inbox / "movielens" / "ratings.csv")]}
        requests, cursor = _evaluate_sensor(defs, instance, cursor)
        assert requests == []
        # The same bytes under another name are the same input: nothing new to ingest.
        (inbox / "movielens" / "copy.csv").write_bytes((inbox / "movielens" / "ratings.csv").read_bytes())
        requests, cursor = _evaluate_sensor(defs, instance, cursor)
        assert requests == []
        (inbox / "more.csv").write_text("a,b\n1,2\n")
        requests, cursor = _evaluate_sensor(defs, instance, cursor)
        assert [r.run_config["ops"]["ingest"]["config"]["source"] for r in requests] == ["csv"]


def test_downstream_assets_follow_ingest(settings):
    defs = build_definitions(settings)
    graph = defs.resolve_asset_graph()
    conditions = {k.to_user_string(): graph.get(k).automation_condition for k in graph.get_all_asset_keys()}
    assert conditions["events"] is None, "ingest runs on the schedule and the sensor only"
    followers = [k for k, c in conditions.items() if c is not None]
    assert followers, "every asset after ingest follows its parents"
    with dg.instance_for_test() as instance:
        first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        # Nothing has been ingested yet: eager waits for parents to update.
        assert first.total_requested == 0
        for key in ("entities", "events", "relations", "content", "rejected_rows"):
            instance.report_runless_asset_event(dg.AssetMaterialization(key))
        second = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
        requested = {k.to_user_string() for k in second.get_requested_asset_keys()} if hasattr(second, "get_requested_asset_keys") else {
            r.key.to_user_string() for r in second.results if r.true_subset.size
        }
        assert requested, "a new ingest requests the assets that read it"
        assert not requested & {"entities", "events", "relations", "content", "rejected_rows"}
