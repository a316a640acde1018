"""Hostile input over every source adapter and the csv mapping: refused with a reason or stored as
data, never executed, never an unexpected exception, and accepted + rejected = read always."""

import json
import random

import pytest
from hir.cli.bench import faults
from hir.cli.bench.faults import (
    ADAPTERS,
    HOSTILE,
    SQL_LIKE,
    Mutation,
    fuzz,
    fuzz_rows,
    hostile_case,
    mutate_row,
)
from hir.errors import SourceError
from hir.graph.sources import read_source
from hir.graph.warehouse import CANONICAL_TABLES, connect, load_batch, table_counts
from hir.settings import Settings
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

values = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40))
raw_bytes = st.one_of(
    st.binary(max_size=400),
    values.map(lambda v: v.encode("utf-8")),
    values.map(lambda v: v.encode("utf-16")),
    st.sampled_from([b"\x00" * 64, "é;ü;ß,1,2".encode("latin-1"), b"\xef\xbb\xbf" + b"a,b\n" * 3, b"\r\r\n\n"]),
)
mutations = st.builds(
    Mutation,
    how=st.sampled_from(("field", "line", "file", "json", "yaml")),
    file=st.integers(0, 7), line=st.integers(0, 7), field=st.integers(0, 11),
    value=values, data=raw_bytes,
)


@pytest.mark.parametrize("kind", sorted(ADAPTERS))
# No shrinking: a failing case is printed as drawn (shrinking a slow adapter takes minutes).
@settings(max_examples=15, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(m=mutations)
def test_adapter_refuses_or_stores_hostile_input(kind, m, tmp_path_factory):
    result = hostile_case(kind, tmp_path_factory.mktemp(kind), m)
    if result.outcome == "refused":
        assert result.reason.strip() and "\n" not in result.reason.strip()
    else:
        assert result.rows_accepted + result.rows_rejected == result.rows_read
        assert result.verbatim, f"{m.value!r} was neither stored nor rejected verbatim"


def test_a_hostile_value_in_a_column_the_adapter_drops_is_not_expected_back(tmp_path):
    # raw_sample's pid (the ad slot) is read and checked but kept by no table; found by the test above
    dropped = Mutation(how="field", file=2, line=7, field=9, value="1 OR 1=1", data=b"")
    result = hostile_case("taobao_ads", tmp_path / "pid", dropped)
    assert result.outcome == "read" and result.rows_accepted == result.rows_read and result.verbatim
    kept = Mutation(how="field", file=0, line=1, field=4, value="1 OR 1=1", data=b"")  # ad_feature's brand
    result = hostile_case("taobao_ads", tmp_path / "brand", kept)
    assert result.rows_rejected == 1 and result.verbatim  # rejected, its raw line kept


def test_seeded_fuzz_has_no_crashes(tmp_path):
    stats = fuzz(20, seed=3, workdir=tmp_path)
    assert stats["fuzz_cases"] == 20
    assert stats["crashes"] == 0 and stats["rows_lost"] == 0 and stats["not_verbatim"] == 0
    assert stats["refused"] + stats["read"] == 20


def test_generated_rows_are_read_and_accounted_in_every_adapter(tmp_path):
    stats = fuzz_rows(220, seed=4, workdir=tmp_path, batch_rows=20)
    assert stats["row_batches"] == 11  # one batch per counted file of every adapter
    assert stats["row_cases"] == stats["read"] + stats["refused"] == 220
    assert stats["crashes"] == 0 and stats["rows_lost"] == 0


def test_a_row_swallowed_by_the_reader_counts_as_lost(tmp_path, monkeypatch):
    # An opening quote makes the CSV reader join the following lines into one row.
    monkeypatch.setattr(faults, "mutate_row", lambda line, sep, rng: line + sep + '"x')
    stats = fuzz_rows(40, seed=0, workdir=tmp_path, batch_rows=20)  # Toys.txt (not CSV), then events.csv
    assert stats["crashes"] == 0 and stats["rows_lost"] > 0


def test_mutated_rows_stay_one_line_and_vary():
    rng = random.Random(0)
    rows = [mutate_row("1,10,100,pv,1511600000", ",", rng) for _ in range(300)]
    assert not any(c in row for row in rows for c in '"\r\n')
    assert len(set(rows)) > 150 and "1,10,100,pv,1511600000" in rows  # duplicates of valid rows too
    assert any(len(row) > 1000 for row in rows) and any(row.count(",") != 4 for row in rows)


def _csv_input(folder, users, titles):
    folder.mkdir()
    events = "user_id,item_id,action,time\n" + "".join(
        f"{json.dumps(u)},{json.dumps('p' + str(i))},view,{1600000000 + i}\n" for i, u in enumerate(users))
    items = "item_id,title,category,colour\n" + "".join(
        f"{json.dumps('p' + str(i))},{json.dumps(t)},shoes,red\n" for i, t in enumerate(titles))
    (folder / "events.csv").write_text(events)
    (folder / "items.csv").write_text(items)
    from hir.cli.bench.faults import MAPPING

    (folder / "mapping.yaml").write_text(MAPPING)
    return folder


def test_sql_looking_keys_and_text_round_trip_verbatim(tmp_path):
    keys = [s for s in SQL_LIKE if "\\" not in s]
    batch = read_source("csv", _csv_input(tmp_path / "in", keys, keys), Settings.from_mapping({"HIR_DATA_HOME": str(tmp_path)}))
    assert batch.rows_rejected == 0
    with connect(tmp_path / "w.duckdb") as con:
        load_batch(con, batch)
        stored = {r[0] for r in con.execute("SELECT source_key FROM entities WHERE entity_type = 'user'").fetchall()}
        texts = {r[0] for r in con.execute("SELECT text FROM content").fetchall()}
        for key in keys:  # a parameterised lookup by the hostile key finds exactly its entity
            assert con.execute("SELECT count(*) FROM entities WHERE source_key = ?", [key]).fetchone()[0] == 1
        counts = table_counts(con)
    assert stored == set(keys)
    assert {t.split(" | ")[0] for t in texts} == set(keys)
    assert counts["events"] == len(keys) and set(counts) == set(CANONICAL_TABLES)


def _amazon(tmp_path, **files):
    folder = ADAPTERS["amazon_seq"].build(tmp_path / "amazon")
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize("name,text", [
    ("toys_datamaps.json", "[" * 100_000 + "]" * 100_000),
    ("Toys_item2attributes.json", json.dumps({"1": "'; DROP TABLE events; --"})),
    ("Toys_item2attributes.json", json.dumps([1, 2])),
])
def test_amazon_json_of_the_wrong_shape_is_one_line(tmp_path, name, text):
    with pytest.raises(SourceError) as err:
        read_source("amazon_seq", _amazon(tmp_path, **{name: text}), Settings.from_mapping({}))
    assert name in str(err.value) and "\n" not in str(err.value)


def test_mapping_not_utf8_or_too_deep_is_one_line(tmp_path):
    folder = ADAPTERS["csv"].build(tmp_path / "csv")
    for data in ("é: [".encode("latin-1"), ("[" * 100_000).encode()):
        (folder / "mapping.yaml").write_bytes(data)
        with pytest.raises(SourceError, match="mapping.yaml"):
            read_source("csv", folder, Settings.from_mapping({}))


@pytest.mark.parametrize("first", ["1,10\r,100,pv,1511600000", "1," + "9" * 200_000 + ",100,pv,1511600000"])
def test_unsplittable_first_line_is_one_line(tmp_path, first):
    path = tmp_path / "ub.csv"
    path.write_text(first + "\n1,10,100,pv,1511600000\n")
    with pytest.raises(SourceError, match="ub.csv"):
        read_source("taobao_userbehavior", path, Settings.from_mapping({}))


def test_catalogue_with_every_row_rejected_is_accounted(tmp_path):
    folder = ADAPTERS["csv"].build(tmp_path / "csv")
    (folder / "items.csv").write_text('item_id,title,category,colour\n"p1,Red shoe,shoes,red\np2,Blue hat,hats,blue\n')
    batch = read_source("csv", folder, Settings.from_mapping({}))
    assert batch.rows_accepted + batch.rows_rejected == batch.rows_read
    assert batch.content.empty


def test_amazon_catalogue_without_brands_reads(tmp_path):
    # every attribute appears after the first position somewhere, so none is a brand
    folder = _amazon(tmp_path, **{"Toys_item2attributes.json": json.dumps({"1": [1, 2], "2": [2, 1]})})
    batch = read_source("amazon_seq", folder, Settings.from_mapping({}))
    assert batch.rows_accepted == 2
    assert not batch.content["text"].str.contains("brand:").any()


@pytest.mark.parametrize("text", ["A1 red lipstick\nA1 again\n\x00\n\x00\n", "", "\n\n"])
def test_amazon_text_file_with_repeats_or_nothing_reads(tmp_path, text):
    folder = _amazon(tmp_path, **{"toys_item_textual_ids.txt": text})
    batch = read_source("amazon_seq", folder, Settings.from_mapping({}))
    assert batch.rows_accepted == 2
    assert ("red lipstick" in batch.content.set_index("source_key").loc["A1", "text"]) == text.startswith("A1")
