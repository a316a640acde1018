"""Tianchi UserBehavior (Taobao, 2017-11-25 .. 2017-12-03): ``user,item,category,behavior,timestamp``.

Input: one headerless comma-separated file, or a folder whose ``*.csv`` files are all read (rows
are validated together, so a row repeated in two files is a duplicate). Fields: integer user id,
item id, category id, behaviour ``pv | cart | fav | buy``, unix seconds.

Output:

* events ``user → product`` with ``event_type`` = the behaviour, ``ts`` = the timestamp and
  ``value`` = 1.0;
* relations ``product → category`` (``in_category``), ``valid_from`` = the first time the pair was
  seen (an item seen under two categories keeps both);
* entities ``user``, ``product``, ``category`` come from those (first seen = earliest event or
  relation).

Rejected rows: wrong field count, empty fields, non-integer ids, unknown behaviours, timestamps
that are not integers or fall outside the data set's documented window — 2017-11-25 00:00 to
2017-12-04 00:00 China time (UTC+8), i.e. [2017-11-24 16:00, 2017-12-03 16:00) UTC — and exact
repeats of an earlier row.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hir.graph.sources.base import SourceBatch
from hir.graph.sources.validate import concat_tables, csv_files, make_batch, read_table
from hir.settings import Settings

SOURCE = "taobao_userbehavior"
COLUMNS = ["user", "item", "category", "behavior", "timestamp"]
BEHAVIOURS = ("pv", "cart", "fav", "buy")
WINDOW_START = pd.Timestamp("2017-11-25 00:00", tz="Asia/Shanghai").tz_convert("UTC")
WINDOW_END = pd.Timestamp("2017-12-04 00:00", tz="Asia/Shanghai").tz_convert("UTC")


def read(path: Path, settings: Settings) -> SourceBatch:
    """Read the UserBehavior file or folder ``path``; ``settings`` is unused (no knobs)."""
    files = csv_files(path, "UserBehavior CSV")
    table = concat_tables([read_table(f, COLUMNS, header=False, what="UserBehavior CSV") for f in files])
    table.reject_blank_lines()
    table.require(COLUMNS)
    table.ids(["user", "item", "category"])
    table.choice("behavior", BEHAVIOURS)
    table.timestamp("timestamp", "ts", start=WINDOW_START, end=WINDOW_END)
    table.duplicates()
    rows = table.frame
    events = pd.DataFrame(
        {
            "src_type": "user",
            "src_key": rows["user"].astype(object),
            "dst_type": "product",
            "dst_key": rows["item"].astype(object),
            "event_type": rows["behavior"].astype(object),
            "ts": rows["ts"],
            "value": 1.0,
        }
    )
    pairs = rows.groupby(["item", "category"], observed=True, sort=True)["ts"].min().reset_index()
    relations = pd.DataFrame(
        {
            "src_type": "product",
            "src_key": pairs["item"].astype(object),
            "dst_type": "category",
            "dst_key": pairs["category"].astype(object),
            "relation": "in_category",
            "valid_from": pairs["ts"],
        }
    )
    return make_batch(SOURCE, path, files, [table], events=events.reset_index(drop=True), relations=relations)
