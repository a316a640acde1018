"""amazon_seq: exact Beauty counts, the end-aligned timestamp rule, attributes, bad lines, idempotent loading."""

import json

import pandas as pd
import pytest
from conftest import shared_data
from hir.errors import SourceError
from hir.graph.sources import read_source
from hir.graph.sources.amazon_seq import ANCHOR
from hir.graph.warehouse import connect, load_batch, table_counts
from hir.settings import Settings

MAPS = {
    "user2id": {"U1": "1", "U2": "2"},
    "item2id": {"A1": "1", "A2": "2", "A3": "3"},
    "id2user": {"1": "U1", "2": "U2"},
    "id2item": {"1": "A1", "2": "A2", "3": "A3"},
    "attribute2id": {"Acme": 1, "Face": 2, "Lips": 3},
    "id2attribute": {"1": "Acme &amp; Co", "2": "Face", "3": "Lips"},
}
# Attribute 1 only ever opens a list → brand; 2 and 3 appear after the first position → categories.
ATTRS = {"1": [1, 2], "2": [3], "3": [1, 3, 2]}


def _folder(tmp_path, seq="1 1 2 3\n2 3 1\n", text="A1 red lipstick\nA2 face cream\n"):
    folder = tmp_path / "toys"
    folder.mkdir(parents=True)
    (folder / "Toys.txt").write_text(seq)
    (folder / "toys_datamaps.json").write_text(json.dumps(MAPS))
    (folder / "Toys_item2attributes.json").write_text(json.dumps(ATTRS))
    if text is not None:
        (folder / "toys_idgenrec_item_textual_ids.txt").write_text(text)
    return folder


def _read(path):
    return read_source("amazon_seq", path, Settings.from_mapping({}))


def test_real_beauty_counts():
    batch = _read(shared_data("amazon_beauty"))
    assert batch.rows_read == batch.rows_accepted == 22_363
    assert len(batch.events) == 198_502
    assert batch.events["src_key"].nunique() == 22_363
    assert batch.events["dst_key"].nunique() == 12_101
    assert set(batch.events["event_type"]) == {"purchase"}
    assert batch.events["ts"].max() == ANCHOR
    last = batch.events.groupby("src_key")["ts"].max()
    assert (last == ANCHOR).all()  # everyone's last item on the anchor day: leave-last-out = last day
    assert batch.content["entity_type"].value_counts().to_dict() == {"product": 12_101, "brand": 435, "category": 202}
    assert batch.content["text"].str.len().gt(0).all()
    assert set(batch.relations["relation"]) == {"of_brand", "in_category"}


def test_timestamps_end_aligned_per_user_in_order(tmp_path):
    batch = _read(_folder(tmp_path))
    u1 = batch.events[batch.events["src_key"] == "U1"]
    assert list(u1["dst_key"]) == ["A1", "A2", "A3"]
    assert list(u1["ts"]) == [ANCHOR - pd.Timedelta(days=2), ANCHOR - pd.Timedelta(days=1), ANCHOR]
    u2 = batch.events[batch.events["src_key"] == "U2"]
    assert list(u2["ts"]) == [ANCHOR - pd.Timedelta(days=1), ANCHOR]


def test_brand_category_relations_and_content(tmp_path):
    batch = _read(_folder(tmp_path))
    rel = set(zip(batch.relations["src_key"], batch.relations["relation"], batch.relations["dst_type"], batch.relations["dst_key"]))
    assert ("A1", "of_brand", "brand", "Acme & Co") in rel
    assert ("A1", "in_category", "category", "Face") in rel
    assert ("A2", "in_category", "category", "Lips") in rel
    assert not any(r[1] == "of_brand" and r[3] != "Acme & Co" for r in rel)
    text = batch.content.set_index("source_key")["text"]
    assert text["A1"] == "red lipstick | brand: Acme & Co | categories: Face"
    assert text["A3"] == "brand: Acme & Co | categories: Lips, Face"
    assert text["Acme & Co"] == "Acme & Co"
    valid = batch.relations.set_index(["src_key", "dst_key"])["valid_from"]
    assert valid[("A1", "Face")] == ANCHOR - pd.Timedelta(days=2)  # the product's first interaction


def test_bad_lines_rejected(tmp_path):
    seq = "1 1 2 3\n2\n2 x 1\n9 1 2\n2 1 7\n1 3\n\n2 3 1\n"
    batch = _read(_folder(tmp_path, seq=seq))
    reasons = dict(zip(batch.rejected["location"], batch.rejected["reason"]))
    assert reasons == {
        "Toys.txt:2": "no items after user '2'",
        "Toys.txt:3": "malformed id in line",
        "Toys.txt:4": "user id not in datamaps '9'",
        "Toys.txt:5": "item id not in datamaps in line",
        "Toys.txt:6": "duplicate user of Toys.txt:1",
        "Toys.txt:7": "empty line",
    }
    assert batch.rows_read == 8 and batch.rows_accepted == 2


def test_missing_files_and_wrong_delimiter(tmp_path):
    folder = _folder(tmp_path, text=None)
    content = _read(folder).content.set_index("source_key")["text"]
    assert content["A2"] == "categories: Lips"  # the text file is optional
    (folder / "toys_datamaps.json").unlink()
    with pytest.raises(SourceError, match=r"toys: no datamaps JSON \(\*_datamaps\.json\) found$"):
        _read(folder)
    with pytest.raises(SourceError, match="expected a folder"):
        _read(folder / "Toys.txt")
    other = _folder(tmp_path / "b", seq="1,1,2\n")
    with pytest.raises(SourceError, match=r"Toys\.txt: wrong delimiter: expected space-separated ids"):
        _read(other)
    broken = _folder(tmp_path / "c")
    (broken / "Toys_item2attributes.json").write_text("{not json")
    with pytest.raises(SourceError, match=r"Toys_item2attributes\.json: item2attributes JSON is not valid JSON"):
        _read(broken)
    binary = _folder(tmp_path / "e")
    (binary / "toys_idgenrec_item_textual_ids.txt").write_bytes(b"A1 \xff\xfe\n")
    with pytest.raises(SourceError, match=r"textual_ids\.txt: item text file is not UTF-8 text"):
        _read(binary)
    empty = _folder(tmp_path / "d", seq="")
    with pytest.raises(SourceError, match=r"Toys\.txt: sequence file is empty$"):
        _read(empty)


def test_loading_twice_adds_nothing(tmp_path):
    folder = _folder(tmp_path)
    with connect(tmp_path / "w.duckdb") as con:
        load_batch(con, _read(folder))
        counts = table_counts(con)
        assert load_batch(con, _read(folder)).skipped
        assert table_counts(con) == counts
    assert counts["events"] == 5 and counts["entities"] == 2 + 3 + 1 + 2
