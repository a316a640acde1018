"""Feast on real online-store servers, started here on free loopback ports (Debian's redis-server
and PostgreSQL): materialise, look up through Feast (the reader, `hir lookup`, `hir serve`),
compare with the offline tables, re-materialise the next day while 8 readers look up."""

import json
import shutil

import dagster as dg
import numpy as np
import pyarrow.parquet as pq
import pytest
from hir.assets.serving import feast_online, feast_registry, feature_tables
from hir.cli.bench.faults import online_load
from hir.cli.bench.feast import (
    free_port,
    post_online,
    postgres_binary,
    postgres_server,
    redis_server,
    start_server,
    stop_server,
    write_fake_upstream,
)
from hir.partitions import cutoff_of
from hir.resources import build_resources
from hir.serving.feast_store import FeastStore, write_feature_tables
from hir.settings import Settings
from hir.storage import Artifacts, atomic_dir

P1, P2 = "2026-01-05", "2026-01-06"
COUNTS = {"user": 6, "ad": 4}
INSTALLED = {"redis": shutil.which("redis-server") is not None, "postgres": postgres_binary("initdb") is not None}


@pytest.fixture(scope="module", params=["redis", "postgres"])
def server(request, tmp_path_factory):
    """``(kind, url)``: a server for this module, stopped at the end; ``url(i)`` is the i-th of
    four empty databases, one per test."""
    kind = request.param
    if not INSTALLED[kind]:
        pytest.skip(f"needs Debian's {kind} server (`make test` installs it)")
    if kind == "redis":
        with redis_server(tmp_path_factory.mktemp("redis")) as port:
            yield kind, lambda i: f"redis://127.0.0.1:{port}/{i}"
    else:
        with postgres_server([f"feast{i}" for i in range(1, 5)]) as port:
            yield kind, lambda i: f"postgresql://hir@127.0.0.1:{port}/feast{i}?sslmode=disable"


def _feast(data_home, server, i: int) -> FeastStore:
    kind, url = server
    return FeastStore.from_settings(Settings.from_env(data_home=data_home, online_store=kind, online_url=url(i)))


def test_pipeline_materialises_into_the_server_and_reads_back_the_offline_tables(data_home, server):
    kind, url = server
    settings = Settings.from_env(data_home=data_home, online_store=kind, online_url=url(1))
    write_fake_upstream(settings.artifacts_dir, P1, COUNTS, 8, seed=1, model_version="m1")
    v2 = write_fake_upstream(settings.artifacts_dir, P2, COUNTS, 8, seed=2, model_version="m2")
    for partition in (P1, P2):
        result = dg.materialize([feature_tables, feast_registry, feast_online], partition_key=partition,
                                resources=build_resources(settings))
        checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
        assert checks["online_matches_tables"] is True, partition
    assert not (settings.feast_dir / "online.db").exists(), "nothing was written to a SQLite store"
    table = pq.read_table(Artifacts(settings.artifacts_dir).feature_table(P2, "user")).to_pylist()
    got = FeastStore.from_settings(settings).online("user", [r["user_key"] for r in table] + ["stranger"])
    for i, row in enumerate(table):
        for name in ("entity_id", "bom_tokens", "coarse_interest", "fine_interest", "model_version"):
            assert got[name][i] == row[name], name
        np.testing.assert_array_equal(np.asarray(got["hir_embedding"][i], np.float32), v2["user"][i])
    assert got["model_version"][-1] is None and got["hir_embedding"][-1] is None


def _one_partition(feast: FeastStore) -> dict:
    """P1's random vectors applied and materialised into ``feast``'s online store."""
    vectors = write_fake_upstream(feast.artifacts_dir, P1, COUNTS, 8, seed=3, model_version="m1")
    catalogue = Artifacts(feast.artifacts_dir)
    with atomic_dir(catalogue.folder("feature_tables", P1)) as out:
        write_feature_tables(catalogue.embeddings(P1), catalogue.tokens(P1), cutoff_of(P1), out)
    feast.apply()
    feast.materialize(cutoff_of(P1), cutoff_of(P1), list(COUNTS))
    return vectors


def test_hir_lookup_reads_the_server(data_home, server, monkeypatch, capsys):
    from hir.cli.main import main

    feast = _feast(data_home, server, 2)
    v1 = _one_partition(feast)
    monkeypatch.setenv("HIR_ONLINE_STORE", feast.online_store)
    monkeypatch.setenv("HIR_ONLINE_URL", feast.online_url)
    assert main(["lookup", "ad", "ad-3", "ad-9", "--json", "--data-home", str(data_home)]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert [r["found"] for r in rows] == [True, False]
    np.testing.assert_array_equal(np.asarray(rows[0]["hir_embedding"], np.float32), v1["ad"][3])


@pytest.mark.slow
def test_hir_serve_answers_from_the_server(data_home, server):
    feast = _feast(data_home, server, 4)
    v1 = _one_partition(feast)
    port = free_port()
    proc = start_server(data_home, port, timeout_s=90,
                        settings={"HIR_ONLINE_STORE": feast.online_store, "HIR_ONLINE_URL": feast.online_url})
    try:
        body = post_online(port, {"feature_service": "ranker_v1", "full_feature_names": True,
                                  "entities": {"user_key": ["user-2", "nobody"], "ad_key": ["ad-1", "ad-0"]}})
    finally:
        stop_server(proc)
    names = body["metadata"]["feature_names"]
    users = body["results"][names.index("user_features__hir_embedding")]["values"]
    np.testing.assert_array_equal(np.asarray(users[0], np.float32), v1["user"][2])
    assert users[1] is None
    ads = body["results"][names.index("ad_features__hir_embedding")]["values"]
    np.testing.assert_array_equal(np.asarray(ads, np.float32), v1["ad"][[1, 0]])


@pytest.mark.slow
def test_reads_during_rematerialisation_are_old_or_new(data_home, server):
    stats = online_load(_feast(data_home, server, 3), clients=8, seconds=3.0, seed=0)
    assert stats["lookups"] > 0
    assert stats["lookup_errors"] == 0
    assert stats["mixed_answers"] == 0
    assert stats["new_seen"] > 0
