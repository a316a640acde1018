"""The synthetic ecosystem: deterministic, planted truth, funnel rates, daily arrivals."""

import hashlib

import pandas as pd
import pytest
from hir.graph.sources.synthetic import generate
from hir.graph.warehouse import connect, load_batch
from hir.settings import Settings


def _digest(batch) -> str:
    h = hashlib.sha256()
    for frame in (batch.entities, batch.events, batch.relations, batch.content, batch.extra_tables["planted_truth"]):
        h.update(pd.util.hash_pandas_object(frame.astype(str), index=False).values.tobytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def batch():
    return generate(Settings.from_mapping({}), events=60_000)


def test_same_seed_same_bytes_other_seed_differs(batch):
    again = generate(Settings.from_mapping({}), events=60_000)
    assert _digest(batch) == _digest(again)
    assert batch.fingerprint == again.fingerprint
    other = generate(Settings.from_mapping({"HIR_SEED": "1"}), events=60_000)
    assert _digest(other) != _digest(batch)
    assert other.fingerprint != batch.fingerprint


def test_hierarchy_and_truth(batch):
    truth = batch.extra_tables["planted_truth"]
    users = truth[truth.entity_type == "user"]
    assert users.coarse_interest.nunique() == 8
    assert users.fine_interest.nunique() == 6
    keys = set(zip(batch.entities.entity_type, batch.entities.source_key))
    assert set(zip(truth.entity_type, truth.source_key)) <= keys
    # Product titles use the words of their own fine interest.
    products = batch.content[batch.content.entity_type == "product"].merge(truth, on=["entity_type", "source_key"])
    from hir.graph.sources.synthetic_vocab import interest_table

    _, _, words = interest_table(8, 6)
    hits = [any(w in text for w in words[c][f]) for text, c, f in zip(products.text, products.coarse_interest, products.fine_interest)]
    assert all(hits)


def test_funnel_rates(batch):
    counts = batch.events.event_type.value_counts()
    assert counts["impression"] > counts["click"] > counts["conversion"] > 0
    assert 0.01 <= counts["conversion"] / counts["click"] <= 0.03
    assert counts["view"] > counts["cart"] > counts["purchase"] > 0
    assert batch.rows_read == len(batch.events) == batch.rows_accepted


def test_new_users_and_products_every_day(batch):
    ent = batch.entities
    for kind in ("user", "product"):
        days = ent[ent.entity_type == kind].first_seen.dt.floor("D").unique()
        assert len(days) == 28, kind  # day 0 plus arrivals on each later day
    ts = batch.events.ts
    assert ts.min() >= pd.Timestamp("2026-01-01", tz="UTC")
    assert ts.max() < pd.Timestamp("2026-01-29", tz="UTC")
    first = ent.set_index(["entity_type", "source_key"]).first_seen
    src_first = first.loc[list(zip(batch.events.src_type.astype(str), batch.events.src_key.astype(str)))].to_numpy()
    assert (batch.events.ts.to_numpy() >= src_first).all(), "no user acts before arriving"


def test_loads_into_warehouse_once(batch, tmp_path):
    with connect(tmp_path / "w.duckdb") as con:
        first = load_batch(con, batch)
        second = load_batch(con, batch)
        truth = con.execute("SELECT count(*), count(DISTINCT entity_id) FROM planted_truth").fetchone()
        ids = con.execute("SELECT min(entity_id), max(entity_id), count(*) FROM entities").fetchone()
    assert first.new_events == len(batch.events) and not first.skipped
    assert second.skipped and second.new_events == 0
    assert truth[0] == truth[1] == len(batch.extra_tables["planted_truth"])
    assert ids == (0, ids[2] - 1, len(batch.entities))
