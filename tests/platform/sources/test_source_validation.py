"""Shared row validation: every bad row is rejected with file:line and a reason; unreadable files raise one line."""

import pandas as pd
import pytest
from hir.errors import SourceError
from hir.graph.sources.validate import read_lines, read_table

COLUMNS = ["user", "item", "ts"]


def _write(tmp_path, text: str, name: str = "log.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _reasons(table) -> dict[str, str]:
    frame = table.rejected_frame()
    return dict(zip(frame["location"], frame["reason"]))


def test_field_counts_blank_lines_and_line_numbers(tmp_path):
    path = _write(tmp_path, "user,item,ts\n1,2,3\n4,5\n\n6,7,8,9\n\"a,b\",2,3\n10,11,12\n")
    table = read_table(path, COLUMNS, header=True)
    table.reject_blank_lines()
    assert table.rows_read == 6
    assert list(table.frame["_line"]) == [2, 6, 7]
    assert list(table.frame["user"]) == ["1", "a,b", "10"]
    reasons = _reasons(table)
    assert reasons == {
        "log.csv:3": "expected 3 fields, found 2",
        "log.csv:5": "expected 3 fields, found 4",
        "log.csv:4": "empty line",
    }
    raw = table.rejected_frame().set_index("location")["raw"]
    assert raw["log.csv:5"] == "6,7,8,9" and raw["log.csv:4"] == ""


def test_missing_fields_ids_and_duplicates(tmp_path):
    path = _write(tmp_path, "1,2,100\n1,,100\nx1,2,100\n1,2,100\n3,4,100\n1,2,100\n")
    table = read_table(path, COLUMNS, header=False)
    table.require(COLUMNS)
    table.ids(["user", "item"])
    table.duplicates()
    assert table.rows_read == 6 and table.rows_accepted == 2
    assert _reasons(table) == {
        "log.csv:2": "missing field item",
        "log.csv:3": "malformed user 'x1'",
        "log.csv:4": "duplicate row of log.csv:1",
        "log.csv:6": "duplicate row of log.csv:1",
    }
    assert table.rejected_frame().set_index("location").loc["log.csv:3", "raw"] == "x1,2,100"


def test_unix_timestamps_unparsable_and_out_of_range(tmp_path):
    path = _write(tmp_path, "1,2,1511544070\n1,2,abc\n1,2,0\n1,2,99999999999999\n1,2,1.5\n")
    table = read_table(path, COLUMNS, header=False)
    table.timestamp("ts", "when")
    assert list(table.frame["when"]) == [pd.Timestamp(1511544070, unit="s", tz="UTC")]
    reasons = _reasons(table)
    assert reasons["log.csv:2"] == "malformed timestamp (unix_s) 'abc'"
    assert reasons["log.csv:3"].startswith("timestamp outside [1990-01-01T00:00:00+00:00, 2100-01-01")
    assert reasons["log.csv:4"].endswith("'99999999999999'")
    assert reasons["log.csv:5"] == "malformed timestamp (unix_s) '1.5'"


def test_iso_timestamps_and_event_types(tmp_path):
    path = _write(tmp_path, "user,item,ts\n1,view,2024-03-01T10:00:00Z\n1,view,yesterday\n1,buy,1850-01-01\n1,poke,2024-03-01\n")
    table = read_table(path, COLUMNS, header=True)
    table.timestamp("ts", "when", fmt="iso")
    table.choice("item", ["view", "buy"])
    assert list(table.frame["when"]) == [pd.Timestamp("2024-03-01T10:00:00Z")]
    reasons = _reasons(table)
    assert reasons["log.csv:3"] == "unparsable timestamp (iso) 'yesterday'"
    assert reasons["log.csv:4"].startswith("timestamp outside")
    assert reasons["log.csv:5"] == "unknown event type 'poke' (expected one of view, buy)"


def test_numbers_parse_and_range(tmp_path):
    path = _write(tmp_path, "a,b,c\n1,2,4.5\n1,2,x\n1,2,9\n")
    table = read_table(path, ["a", "b", "c"], header=True)
    table.number("c", "value", 0.5, 5)
    assert list(table.frame["value"]) == [4.5]
    reasons = _reasons(table)
    assert reasons == {"log.csv:3": "malformed c 'x'", "log.csv:4": "c outside [0.5, 5]: '9'"}


@pytest.mark.parametrize(
    "text, header, message",
    [
        ("user;item;ts\n1;2;3\n", True, "wrong delimiter: expected ','-separated fields, the first line is separated by ';'"),
        ("1\t2\t3\n", False, "wrong delimiter: expected ','-separated fields, the first line is separated by '\\t'"),
        ("1,2,3\n4,5,6\n", True, "no header line with columns user, item, ts (first line: '1,2,3')"),
        ("user,item\n1,2\n", True, "missing columns ts (header has user, item)"),
        ("1,2,3,4\n", False, "expected 3 ','-separated fields (user, item, ts), the first line has 4"),
        ("\n1,2,3\n", True, "no header line (the first line is blank); expected columns user, item, ts"),
    ],
)
def test_unreadable_layouts_raise_one_line_naming_the_file(tmp_path, text, header, message):
    path = _write(tmp_path, text)
    with pytest.raises(SourceError) as err:
        read_table(path, COLUMNS, header=header)
    assert str(err.value) == f"{path}: {message}"
    assert "\n" not in str(err.value)


def test_empty_missing_and_binary_files(tmp_path):
    with pytest.raises(SourceError, match=r"log\.csv: ratings file is empty$"):
        read_table(_write(tmp_path, ""), COLUMNS, header=True, what="ratings file")
    with pytest.raises(SourceError, match=r"nope\.csv: ratings file not found$"):
        read_table(tmp_path / "nope.csv", COLUMNS, header=True, what="ratings file")
    bad = tmp_path / "bin.csv"
    bad.write_bytes(b"user,item,ts\n1,\xff\xfe,3\n")
    with pytest.raises(SourceError, match=r"bin\.csv: cannot read as ','-delimited text"):
        read_table(bad, COLUMNS, header=True)


def test_read_lines_numbers_lines(tmp_path):
    table = read_lines(_write(tmp_path, "1 2 3\r\n4 5\n", "seq.txt"), "sequence file")
    assert list(table.frame["line"]) == ["1 2 3", "4 5"]
    assert list(table.frame["_line"]) == [1, 2]
    assert table.rows_read == 2
