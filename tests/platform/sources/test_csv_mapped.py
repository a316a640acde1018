"""csv: a YAML mapping of columns to the canonical tables; the fashion catalogue mapping on real data."""

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, shared_data
from hir.errors import SourceError
from hir.graph.sources import read_source
from hir.graph.warehouse import connect, load_batch, table_counts
from hir.settings import Settings

FASHION_MAPPING = REPO / "tests" / "fixtures" / "fashion_mapping.yaml"

MAPPING = """
events:
  - file: log.csv
    src: {type: user, column: who}
    dst: {type: product, column: what}
    event_type: {column: action, allowed: [view, buy]}
    ts: {column: at, format: iso}
    value: {column: amount}
entities:
  - file: items.csv
    type: product
    key: sku
    text: [title, kind]
    image: {column: photo, dir: pics}
    attrs: [colour]
relations:
  - file: items.csv
    src: {type: product, column: sku}
    dst: {type: category, column: kind}
    relation: in_category
    valid_from: {constant: "2024-01-01"}
"""
LOG = "who,what,action,at,amount\nu1,p1,view,2024-03-01T10:00:00Z,1\nu1,p1,buy,2024-03-01 11:00:00,19.5\n"
ITEMS = "sku,title,kind,photo,colour\np1,Red shirt,shirts,p1.jpg,red\np2,Blue mug,,p2.jpg,\n"


def _folder(tmp_path, mapping=MAPPING, log=LOG, items=ITEMS):
    folder = tmp_path / "shop"
    (folder / "pics").mkdir(parents=True)
    for name in ("p1.jpg", "p2.jpg"):
        (folder / "pics" / name).write_bytes(b"\xff\xd8")
    for name, text in (("mapping.yaml", mapping), ("log.csv", log), ("items.csv", items)):
        if text is not None:
            (folder / name).write_text(text)
    return folder


def _read(path, **env):
    return read_source("csv", path, Settings.from_mapping(env))


def test_fashion_catalogue_products_with_images_and_categories():
    styles = shared_data("fashion_images") / "styles.csv"
    batch = _read(styles, HIR_CSV_MAPPING=str(FASHION_MAPPING))
    assert batch.rows_read == batch.rows_accepted == 2_000
    assert len(batch.events) == 0
    products = batch.content[batch.content["entity_type"] == "product"]
    categories = batch.content.loc[batch.content["entity_type"] == "category", "source_key"]
    assert len(products) == 2_000 and products["image_uri"].notna().all()
    assert set(categories) == set(batch.relations["dst_key"]) and "Topwear" in set(categories)
    content = products.set_index("source_key")
    assert content.loc["15970", "text"] == "Turtle Check Men Navy Blue Shirt | Shirts | Topwear | Apparel"
    assert content.loc["15970", "image_uri"] == str((styles.parent / "images" / "15970.jpg").resolve())
    assert all(Path(uri).is_file() for uri in products["image_uri"])
    assert set(batch.relations["relation"]) == {"in_category", "subcategory_of"}
    assert set(batch.relations["dst_type"]) == {"category"}
    assert "brand" not in set(batch.relations["dst_type"])
    attrs = json.loads(batch.entities.set_index("source_key").loc["15970", "attrs"])
    assert attrs == {"gender": "Men", "baseColour": "Navy Blue", "season": "Fall", "year": "2011", "usage": "Casual"}


def test_events_entities_relations_from_a_mapping(tmp_path):
    batch = _read(_folder(tmp_path))
    assert batch.rows_read == batch.rows_accepted == 4
    ev = batch.events
    assert list(ev["event_type"]) == ["view", "buy"]
    assert list(ev["ts"]) == [pd.Timestamp("2024-03-01T10:00:00Z"), pd.Timestamp("2024-03-01T11:00:00Z")]
    assert list(ev["value"]) == [1.0, 19.5]
    content = batch.content.set_index("source_key")
    assert content.loc["p1", "text"] == "Red shirt | shirts"
    assert content.loc["p2", "text"] == "Blue mug"
    assert content.loc["p2", "image_uri"].endswith("shop/pics/p2.jpg")
    rel = batch.relations
    assert list(zip(rel["src_key"], rel["dst_key"])) == [("p1", "shirts")]  # p2 has no kind: no relation
    assert rel["valid_from"].iloc[0] == pd.Timestamp("2024-01-01", tz="UTC")
    assert json.loads(batch.entities.set_index("source_key").loc["p2", "attrs"]) == {"colour": None}


def test_bad_rows_rejected_with_reasons(tmp_path):
    log = LOG + "u2,p1,poke,2024-03-01,1\nu2,p1,view,not a date,1\n,p1,view,2024-03-01,1\nu2,p1,view,1800-01-01,1\nu2,p1,view,2024-03-01,lots\n" + LOG.split("\n")[1] + "\n"
    items = ITEMS + "p3,Lamp,lamps,missing.jpg,\n,Nameless,x,p1.jpg,\n"
    batch = _read(_folder(tmp_path, log=log, items=items))
    reasons = dict(zip(batch.rejected["location"], batch.rejected["reason"]))
    assert reasons["log.csv:4"] == "unknown event type 'poke' (expected one of view, buy)"
    assert reasons["log.csv:5"] == "unparsable timestamp (iso) 'not a date'"
    assert reasons["log.csv:6"] == "missing field who"
    assert reasons["log.csv:7"].startswith("timestamp outside [1990-01-01")
    assert reasons["log.csv:8"] == "malformed amount 'lots'"
    assert reasons["log.csv:9"] == "duplicate row of log.csv:2"
    assert reasons["items.csv:4"].startswith("image file not found under ") and reasons["items.csv:4"].endswith("'missing.jpg'")
    assert reasons["items.csv:5"] == "missing field sku"
    assert batch.rows_read == 12 and batch.rows_accepted == 4


@pytest.mark.parametrize(
    "mapping, message",
    [
        ("events: [", "CSV mapping is not valid YAML"),
        ("colour: red\n", "CSV mapping needs at least one of the sections events, entities, relations"),
        ("events:\n  - file: log.csv\n    src: {type: user, column: who}\n", "events[0] lacks dst, event_type, ts"),
        ("entities:\n  - {file: items.csv, type: product, key: nope}\n", "items.csv: missing columns nope (header has sku, title, kind, photo, colour)"),
    ],
)
def test_bad_mappings_raise_one_line(tmp_path, mapping, message):
    with pytest.raises(SourceError) as err:
        _read(_folder(tmp_path, mapping=mapping))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_missing_mapping_and_missing_or_empty_data(tmp_path):
    folder = _folder(tmp_path, mapping=None)
    with pytest.raises(SourceError, match=r"mapping\.yaml: CSV mapping not found"):
        _read(folder)
    folder = tmp_path / "shop"
    (folder / "mapping.yaml").write_text(MAPPING)
    (folder / "log.csv").unlink()
    with pytest.raises(SourceError, match=r"log\.csv: CSV input not found$"):
        _read(folder)
    (folder / "log.csv").write_text("")
    with pytest.raises(SourceError, match=r"log\.csv: CSV input is empty$"):
        _read(folder)
    (folder / "log.csv").write_text(LOG.replace(",", ";"))
    with pytest.raises(SourceError, match=r"log\.csv: wrong delimiter"):
        _read(folder)


def test_loading_twice_adds_nothing_and_mapping_change_is_a_new_input(tmp_path):
    folder = _folder(tmp_path)
    with connect(tmp_path / "w.duckdb") as con:
        load_batch(con, _read(folder))
        counts = table_counts(con)
        assert load_batch(con, _read(folder)).skipped
        assert table_counts(con) == counts
        (folder / "mapping.yaml").write_text(MAPPING.replace("in_category", "listed_in"))
        assert not load_batch(con, _read(folder)).skipped
        assert table_counts(con)["events"] == counts["events"]  # same events are not duplicated
    assert counts == {"entities": 4, "events": 2, "relations": 1, "content": 2, "rejected_rows": 0}


def test_relation_without_valid_from_starts_at_its_first_event(tmp_path):
    mapping = MAPPING.replace('    valid_from: {constant: "2024-01-01"}\n', "")
    items = ITEMS + "p3,Green shirt,shirts,p1.jpg,green\n"
    log = LOG + "u3,p2,view,2024-03-01T09:00:00Z,1\n"
    batch = _read(_folder(tmp_path, mapping=mapping, log=log, items=items))
    since = batch.relations.set_index("src_key")["valid_from"]
    assert since["p1"] == pd.Timestamp("2024-03-01T10:00:00Z")  # p1's first event
    assert since["p3"] == pd.Timestamp("2024-03-01T09:00:00Z")  # never seen: the input's first event


def test_missing_data_path_is_named_before_the_mapping(tmp_path):
    with pytest.raises(SourceError, match=r"nowhere\.csv: CSV source not found$"):
        _read(tmp_path / "nowhere.csv")
