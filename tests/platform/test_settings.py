import pytest
from hir.errors import SettingsError
from hir.settings import Settings


def test_env_overrides_defaults(tmp_path):
    s = Settings.from_mapping({"HIR_DATA_HOME": str(tmp_path), "HIR_THREADS": "3", "HIR_HALF_LIFE_DAYS": "click=2"})
    assert s.data_home == tmp_path.resolve()
    assert s.threads == 3
    assert s.half_life("click") == 2.0
    assert s.half_life("impression") == 3.0
    assert s.half_life("never-seen") == s.default_half_life_days


def test_bad_value_names_the_variable():
    with pytest.raises(SettingsError, match="HIR_THREADS"):
        Settings.from_mapping({"HIR_THREADS": "many"})


def test_path_outside_data_home_refused_unless_allowed(tmp_path):
    s = Settings.from_mapping({"HIR_DATA_HOME": str(tmp_path / "home")})
    assert s.resolve_path(tmp_path / "home" / "x", "HIR_X") == (tmp_path / "home" / "x").resolve()
    with pytest.raises(SettingsError, match="outside the data home"):
        s.resolve_path(tmp_path / "elsewhere", "HIR_X")
    allowed = Settings.from_mapping({"HIR_DATA_HOME": str(tmp_path / "home"), "HIR_ALLOW_OUTSIDE_PATHS": "1"})
    assert allowed.resolve_path(tmp_path / "elsewhere", "HIR_X") == (tmp_path / "elsewhere").resolve()


def test_as_env_rebuilds_the_same_settings(tmp_path):
    s = Settings.from_mapping({"HIR_DATA_HOME": str(tmp_path)}, threads=3, warm_start=False, train_lr=0.01,
                              half_life_days={"click": 2.5, "view": 1.0}, source="movielens")
    env = s.as_env()
    assert env["HIR_WARM_START"] == "0" and env["HIR_THREADS"] == "3"
    assert "HIR_TRAIN_STEPS" not in env  # defaults stay out, so the resource page shows what differs
    assert Settings.from_mapping(env) == s


def test_the_settings_resource_hands_assets_the_settings_it_was_built_from(tmp_path):
    from hir.resources import build_resources

    s = Settings.from_mapping({"HIR_DATA_HOME": str(tmp_path), "HIR_TRAIN_STEPS": "7", "HIR_SOURCE": "csv"})
    assert build_resources(s)["hir_settings"].get() == s


def test_definitions_take_partitions_from_their_settings_not_from_import_time(tmp_path, monkeypatch):
    """hir.assets was imported with one environment; definitions built for another source must
    put every daily asset and hir_job on that source's partitions (this failed once: the job
    said 2000-01-01, the assets 2026-01-01)."""
    import hir.assets.graph  # noqa: F401  (imported before the settings change)
    from hir.definitions import build_definitions

    for source, start in (("csv", "2000-01-01"), ("synthetic", "2026-01-01"), ("movielens", "1996-03-29")):
        defs = build_definitions(Settings.from_mapping({"HIR_DATA_HOME": str(tmp_path), "HIR_SOURCE": source}))
        job = defs.resolve_job_def("hir_job")
        assert job.partitions_def.get_first_partition_key() == start
        graph = defs.resolve_asset_graph()
        starts = {graph.get(k).partitions_def.get_first_partition_key()
                  for k in graph.get_all_asset_keys() if graph.get(k).partitions_def is not None}
        assert starts == {start}
