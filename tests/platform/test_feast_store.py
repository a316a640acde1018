"""The Feast store: feature tables, apply, materialise, online and point-in-time reads, the HTTP server."""

import json
import sqlite3
from datetime import timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hir.cli.bench.feast import (
    free_port,
    post_online,
    start_server,
    stop_server,
    write_fake_upstream,
)
from hir.errors import SettingsError
from hir.partitions import cutoff_of
from hir.serving.feast_store import (
    REPO_DIR,
    FeastStore,
    check_feature_table,
    online_store_config,
    type_name,
    write_feature_tables,
)
from hir.settings import Settings
from hir.storage import Artifacts, atomic_dir, write_parquet

P1, P2 = "2026-01-05", "2026-01-06"
COUNTS = {"user": 6, "ad": 4, "brand": 3}
DIM = 8


def _tables(settings: Settings, partition: str) -> dict:
    art = settings.artifacts_dir
    with atomic_dir(art / "feature_tables" / partition) as out:
        return write_feature_tables(art / "entity_embeddings" / partition / "embeddings.parquet",
                                    art / "bom_tokens" / partition / "tokens.parquet", cutoff_of(partition), out)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Two partitions (the second without a tokens file) applied; online snapshots after each materialisation."""
    settings = Settings.from_env(data_home=tmp_path_factory.mktemp("feast_home"))
    v1 = write_fake_upstream(settings.artifacts_dir, P1, COUNTS, DIM, seed=1, model_version="m1")
    v2 = write_fake_upstream(settings.artifacts_dir, P2, COUNTS, DIM, seed=2, with_tokens=False, model_version="m2")
    _tables(settings, P1)
    _tables(settings, P2)
    feast = FeastStore.from_settings(settings)
    store = feast.store()
    feast.apply(store)
    keys = [f"user-{i}" for i in range(COUNTS["user"])]
    feast.materialize(cutoff_of(P1), cutoff_of(P1), list(COUNTS), store)
    first = feast.online("user", keys + ["user-unknown"], reader=feast.reader(store))
    feast.materialize(cutoff_of(P2), cutoff_of(P2), list(COUNTS), store)
    return {"settings": settings, "feast": feast, "store": store, "v1": v1, "v2": v2, "keys": keys, "first": first}


def test_online_features_equal_the_embeddings_written(world):
    got = world["first"]
    np.testing.assert_array_equal(np.array(got["hir_embedding"][:-1], np.float32), world["v1"]["user"])
    assert got["model_version"][:-1] == ["m1"] * COUNTS["user"]
    assert got["entity_id"][:-1] == list(range(COUNTS["user"]))
    assert got["bom_tokens"][0] == [0, 1_000_000, 2_000_000]
    assert got["coarse_interest"][3] == 3 % 7 and got["fine_interest"][3] == 3 % 5


def test_unknown_keys_come_back_missing(world):
    got = world["first"]
    assert got["user_key"][-1] == "user-unknown"
    assert all(got[f][-1] is None for f in ("hir_embedding", "bom_tokens", "entity_id", "model_version"))


def test_online_store_holds_the_newer_partition(world):
    got = world["feast"].online("ad", [f"ad-{i}" for i in range(COUNTS["ad"])])
    np.testing.assert_array_equal(np.array(got["hir_embedding"], np.float32), world["v2"]["ad"])
    assert got["model_version"] == ["m2"] * COUNTS["ad"]
    assert got["bom_tokens"] == [[]] * COUNTS["ad"], "no tokens file: empty token lists"


def test_historical_features_are_point_in_time(world):
    c1, c2 = cutoff_of(P1), cutoff_of(P2)
    frame = pd.DataFrame({
        "user_key": ["user-2", "user-2", "user-4", "user-1"],
        "ad_key": ["ad-1", "ad-1", "ad-3", "ad-nope"],
        "event_timestamp": [c1 + timedelta(hours=6), c2 + timedelta(hours=1), c1 - timedelta(hours=1), c1 + timedelta(hours=23)],
        "clicked": [1, 0, 1, 0],
    })
    out = world["feast"].training_set(frame, store=world["store"])
    assert out["clicked"].tolist() == [1, 0, 1, 0], "rows keep their order and labels"
    np.testing.assert_array_equal(np.asarray(out["user_features__hir_embedding"][0], np.float32), world["v1"]["user"][2])
    np.testing.assert_array_equal(np.asarray(out["ad_features__hir_embedding"][0], np.float32), world["v1"]["ad"][1])
    np.testing.assert_array_equal(np.asarray(out["user_features__hir_embedding"][1], np.float32), world["v2"]["user"][2])
    assert out["user_features__model_version"].tolist()[:2] == ["m1", "m2"]
    assert pd.isna(out["user_features__model_version"][2]), "before the first cut-off nothing is known"
    assert pd.isna(out["ad_features__model_version"][3]) and out["user_features__model_version"][3] == "m1"


def test_rematerialising_leaves_one_row_per_entity_and_prints_progress_to_stderr(world, capsys):
    feast, store = world["feast"], world["store"]
    _tables(world["settings"], P2)
    feast.materialize(cutoff_of(P2), cutoff_of(P2), list(COUNTS), store)
    out, err = capsys.readouterr()
    assert out == "" and "Materializing" in err  # stdout stays the caller's (`hir eval --json`)
    with sqlite3.connect(str(feast.online_path)) as con:
        rows = con.execute("SELECT feature_name, count(*), count(DISTINCT entity_key) FROM hir_user_features "
                           "GROUP BY feature_name").fetchall()
    assert len(rows) == 7
    assert all(n == distinct == COUNTS["user"] for _, n, distinct in rows)


@pytest.mark.slow
def test_feature_server_answers_like_the_sdk(world):
    keys = ["user-0", "user-5", "user-unknown"]
    sdk = world["feast"].online("user", keys)
    port = free_port()
    proc = start_server(world["settings"].data_home, port, timeout_s=90)
    try:
        body = post_online(port, {"features": ["user_features:hir_embedding", "user_features:model_version"],
                                  "entities": {"user_key": keys}})
        ranker = post_online(port, {"feature_service": "ranker_v1", "full_feature_names": True,
                                    "entities": {"user_key": keys[:1], "ad_key": ["ad-2"]}})
    finally:
        stop_server(proc)
    names = body["metadata"]["feature_names"]
    vectors = body["results"][names.index("hir_embedding")]["values"]
    np.testing.assert_array_equal(np.array(vectors[:2], np.float32), np.array(sdk["hir_embedding"][:2], np.float32))
    assert vectors[2] is None
    assert body["results"][names.index("model_version")]["values"][:2] == ["m2", "m2"]
    ad_vec = ranker["results"][ranker["metadata"]["feature_names"].index("ad_features__hir_embedding")]["values"][0]
    np.testing.assert_array_equal(np.array(ad_vec, np.float32), world["v2"]["ad"][2])


def test_feast_reads_the_repository_from_any_directory(world, tmp_path, monkeypatch):
    """What `feast -c feature_repo …` does: Feast's own loader expands ${HIR_DATA_HOME} in the yaml."""
    from feast import FeatureStore

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HIR_DATA_HOME", str(world["settings"].data_home))
    store = FeatureStore(repo_path=str(REPO_DIR))
    assert store.config.online_store.path == str(world["feast"].online_path)
    assert [s.name for s in store.list_feature_services()] == ["ranker_v1"]
    assert store.config.materialization_config.online_write_batch_size > 0


def test_hir_lookup_reports_unknown_keys_as_missing(world, capsys):
    from hir.cli.main import main

    home = str(world["settings"].data_home)
    assert main(["lookup", "user", "user-1", "nobody", "--json", "--data-home", home]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert [r["found"] for r in rows] == [True, False]
    np.testing.assert_array_equal(np.array(rows[0]["hir_embedding"], np.float32), world["v2"]["user"][1])
    assert rows[1]["hir_embedding"] is None
    assert main(["lookup", "spaceship", "x", "--data-home", home]) == 2
    assert "unknown entity type" in capsys.readouterr().err


def test_feature_table_checks_count_bad_rows(tmp_path):
    table = pa.table({
        "user_key": ["a", "b", "b", "c"],
        "hir_embedding": pa.array([[1.0, 2.0], [np.nan, 0.0], [0.0, 0.0], [1.0]], pa.list_(pa.float32())),
        "cutoff": pa.repeat(pa.scalar(cutoff_of(P1), pa.timestamp("us", tz="UTC")), 4),
    })
    write_parquet(tmp_path / "user.parquet", table)
    assert check_feature_table(tmp_path / "user.parquet", 2) == {"nonfinite_rows": 1, "wrong_dim_rows": 1, "duplicate_rows": 1}


def test_feature_tables_refuse_rows_of_another_cutoff(tmp_path):
    settings = Settings.from_env(data_home=tmp_path)
    write_fake_upstream(settings.artifacts_dir, P1, {"user": 2}, 4)
    with pytest.raises(ValueError, match="cut-off other than"):
        write_feature_tables(settings.artifacts_dir / "entity_embeddings" / P1 / "embeddings.parquet", None,
                             cutoff_of(P2), tmp_path / "out")


def test_feature_tables_refuse_rows_without_a_key(tmp_path):
    settings = Settings.from_env(data_home=tmp_path)
    write_fake_upstream(settings.artifacts_dir, P1, {"user": 3}, 4)
    path = settings.artifacts_dir / "entity_embeddings" / P1 / "embeddings.parquet"
    table = pq.read_table(path)
    keys = pa.array(["user-0", None, "user-2"], pa.string())
    write_parquet(path, table.set_column(table.schema.get_field_index("source_key"), "source_key", keys))
    with pytest.raises(ValueError, match="1 rows lack a source_key"):
        write_feature_tables(path, None, cutoff_of(P1), tmp_path / "out")


def test_feature_tables_split_by_type_with_tokens(tmp_path):
    settings = Settings.from_env(data_home=tmp_path)
    write_fake_upstream(settings.artifacts_dir, P1, {"user": 3, "Ad Group": 2}, 4)
    stats = _tables(settings, P1)
    assert stats == {"user": {"rows": 3, "dim": 4, "with_tokens": 3}, "ad_group": {"rows": 2, "dim": 4, "with_tokens": 2}}
    table = pq.read_table(Artifacts(settings.artifacts_dir).feature_table(P1, "ad_group"))
    assert table.column("ad_group_key").to_pylist() == ["Ad Group-0", "Ad Group-1"]
    assert table.column("bom_tokens").to_pylist()[1] == [4 % 7, 1_000_000 + 4 % 5, 2_000_000 + 4 % 3]


def test_type_names():
    assert type_name("Ad Group") == "ad_group"
    with pytest.raises(SettingsError):
        type_name("9lives")


def test_online_reader_answers_like_feasts_get_online_features(world):
    """hir's reader (the store's own online_read) returns what Feast's get_online_features does."""
    store = world["store"]
    entities = {"user_key": ["user-0", "user-3", "nobody"], "ad_key": ["ad-1", "ad-1", "ad-zzz"]}
    service = store.get_feature_service("ranker_v1")
    want = store.get_online_features(features=service, entity_rows=entities, full_feature_names=True).to_dict()
    got = world["feast"].reader(store).service("ranker_v1", entities)
    assert set(got) == set(want) - set(entities) and len(got) == 14
    for name, values in got.items():
        assert values == want[name], name


def test_online_store_settings_render_feasts_online_store_block():
    assert online_store_config("sqlite", "") is None
    assert online_store_config("redis", "redis://:s%40cret@cache.internal:6380/2") == {
        "type": "redis", "connection_string": "cache.internal:6380,db=2,ssl=false,password=s@cret"}
    assert online_store_config("redis", "rediss://cache")["connection_string"] == "cache:6379,db=0,ssl=true"
    assert online_store_config("postgres", "postgresql://feast:pw@db:5433/online?sslmode=disable") == {
        "type": "postgres", "host": "db", "port": 5433, "database": "online", "user": "feast", "password": "pw",
        "sslmode": "disable"}
    for kind, url in [("cassandra", ""), ("redis", ""), ("redis", "postgresql://db/x"), ("postgres", "postgresql://db")]:
        with pytest.raises(SettingsError):
            online_store_config(kind, url)


def test_the_resource_renders_the_configured_store(tmp_path):
    settings = Settings.from_env(data_home=tmp_path, online_store="redis", online_url="redis://127.0.0.1:7001/3")
    feast = FeastStore.from_settings(settings)
    config = feast.repo_config()
    assert config.online_store.type == "redis"
    assert config.online_store.connection_string == "127.0.0.1:7001,db=3,ssl=false"
    assert feast.online_target == "redis 127.0.0.1:7001/3"
    assert config.registry.path == str(settings.feast_dir / "registry.db"), "the registry stays under the data home"
