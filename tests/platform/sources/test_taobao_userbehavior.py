"""taobao_userbehavior: exact counts on the real head file, bad rows, folders, idempotent loading."""

import pandas as pd
import pytest
from conftest import shared_data
from hir.errors import SourceError
from hir.graph.sources import read_source
from hir.graph.warehouse import connect, load_batch, table_counts
from hir.settings import Settings

GOOD = "1,2268318,2520377,pv,1511544070\n1,2333346,2520771,cart,1511561733\n2,2268318,2520377,buy,1511572885\n"


def _read(path):
    return read_source("taobao_userbehavior", path, Settings.from_mapping({}))


def test_real_head_file_every_row_accounted():
    batch = _read(shared_data("taobao_userbehavior") / "UserBehavior_head.csv")
    assert batch.rows_read == 84_475
    assert batch.rows_accepted + len(batch.rejected) == 84_475
    # 35 rows fall before the data set's window (2017-11-25 00:00 China time); nothing else is wrong.
    assert len(batch.rejected) == 35
    assert batch.rejected["reason"].str.startswith("timestamp outside [2017-11-24T16:00:00+00:00").all()
    assert "UserBehavior_head.csv:4171" in set(batch.rejected["location"])
    assert len(batch.events) == 84_440
    assert batch.events["src_key"].nunique() == 815
    assert batch.events["event_type"].value_counts().to_dict() == {"pv": 75_837, "cart": 4_497, "fav": 2_356, "buy": 1_750}
    assert set(batch.relations["relation"]) == {"in_category"}
    assert batch.relations["dst_key"].nunique() == 2_913


def test_events_and_category_relation_first_seen(tmp_path):
    path = tmp_path / "ub.csv"
    path.write_text(GOOD)
    batch = _read(path)
    assert batch.rows_read == batch.rows_accepted == 3
    events = batch.events.sort_values("ts")
    assert list(events["event_type"]) == ["pv", "cart", "buy"]
    assert events["ts"].iloc[0] == pd.Timestamp(1511544070, unit="s", tz="UTC")
    rel = batch.relations.set_index("src_key")
    assert rel.loc["2268318", "dst_key"] == "2520377"
    assert rel.loc["2268318", "valid_from"] == pd.Timestamp(1511544070, unit="s", tz="UTC")


def test_bad_rows_land_in_rejected_with_location_and_reason(tmp_path):
    path = tmp_path / "ub.csv"
    path.write_text(
        GOOD
        + "3,11,12,pv\n"  # 4: too few fields
        + "3,,12,pv,1511544070\n"  # 5: missing item
        + "3,11,12,click,1511544070\n"  # 6: unknown behaviour
        + "3,11,12,pv,soon\n"  # 7: unparsable time
        + "3,11,12,pv,1600000000\n"  # 8: after the window
        + "1,2268318,2520377,pv,1511544070\n"  # 9: duplicate of line 1
        + "x,11,12,pv,1511544070\n"  # 10: malformed user id
    )
    batch = _read(path)
    assert batch.rows_read == 10 and batch.rows_accepted == 3
    reasons = dict(zip(batch.rejected["location"], batch.rejected["reason"]))
    assert reasons["ub.csv:4"] == "expected 5 fields, found 4"
    assert reasons["ub.csv:5"] == "missing field item"
    assert reasons["ub.csv:6"] == "unknown event type 'click' (expected one of pv, cart, fav, buy)"
    assert reasons["ub.csv:7"] == "malformed timestamp (unix_s) 'soon'"
    assert reasons["ub.csv:8"].startswith("timestamp outside [2017-11-24T16:00:00+00:00, 2017-12-03T16:00:00+00:00)")
    assert reasons["ub.csv:9"] == "duplicate row of ub.csv:1"
    assert reasons["ub.csv:10"] == "malformed user 'x'"


def test_folder_of_csvs_dedups_across_files(tmp_path):
    (tmp_path / "a.csv").write_text(GOOD)
    (tmp_path / "b.csv").write_text("1,2268318,2520377,pv,1511544070\n5,6,7,fav,1511544070\n")
    batch = _read(tmp_path)
    assert batch.rows_read == 5 and batch.rows_accepted == 4
    assert batch.rejected.to_dict("records") == [
        {"location": "b.csv:1", "raw": "1,2268318,2520377,pv,1511544070", "reason": "duplicate row of a.csv:1"}
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "UserBehavior CSV is empty"),
        ("1;2;3;pv;1511544070\n", "wrong delimiter: expected ','-separated fields, the first line is separated by ';'"),
        ("1,2,3,pv\n", "expected 5 ','-separated fields (user, item, category, behavior, timestamp), the first line has 4"),
    ],
)
def test_unreadable_files_raise_one_line(tmp_path, text, message):
    path = tmp_path / "ub.csv"
    path.write_text(text)
    with pytest.raises(SourceError) as err:
        _read(path)
    assert str(err.value) == f"{path}: {message}"


def test_missing_file_and_empty_folder(tmp_path):
    with pytest.raises(SourceError, match=r"nope\.csv: UserBehavior CSV not found$"):
        _read(tmp_path / "nope.csv")
    with pytest.raises(SourceError, match=r"no \*\.csv files in this folder"):
        _read(tmp_path)


def test_loading_the_same_file_twice_adds_nothing(tmp_path):
    path = tmp_path / "ub.csv"
    path.write_text(GOOD + "9,9,9,nope,1511544070\n")
    with connect(tmp_path / "w.duckdb") as con:
        first = load_batch(con, _read(path))
        counts = table_counts(con)
        second = load_batch(con, _read(path))
        assert not first.skipped and second.skipped
        assert table_counts(con) == counts
    assert counts == {"entities": 6, "events": 3, "relations": 2, "content": 0, "rejected_rows": 1}


def test_a_new_file_appends_only_new_events(tmp_path):
    first, second = tmp_path / "day1.csv", tmp_path / "day2.csv"
    first.write_text(GOOD)
    second.write_text(GOOD.splitlines(keepends=True)[2] + "7,2268318,2520377,fav,1511600000\n")
    with connect(tmp_path / "w.duckdb") as con:
        load_batch(con, _read(first))
        report = load_batch(con, _read(second))
        assert report.new_events == 1 and report.new_entities == 1
        assert table_counts(con)["events"] == 4
