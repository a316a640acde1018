"""Tianchi Ali_Display_Ad_Click (Taobao display ads, 2017-05-06 .. 2017-05-13): two entry points.

**A folder of the four raw tables** (comma-separated, with headers):

* ``raw_sample.csv`` (required) ``user,time_stamp,adgroup_id,pid,nonclk,clk``: an ``impression``
  event ``user → ad`` for every row and a ``click`` for ``clk = 1`` (same time, ``value`` 1.0);
  ``clk`` and ``nonclk`` must be 0/1 and differ.
* ``ad_feature.csv`` (required) ``adgroup_id,cate_id,campaign_id,customer,brand,price``: ``ad``
  entities (attrs ``{"price"}``); relations ``ad → campaign`` (``in_campaign``), ``campaign →
  advertiser`` (``of_advertiser``, the ``customer``), ``ad → category`` (``in_category``), ``ad →
  brand`` (``of_brand``; none where brand is empty or ``NULL``). The table has no times: an ad's
  relations are valid from its first impression (the log's first time for an ad never shown);
  a campaign's advertiser from the earliest of its ads.
* ``user_profile.csv`` (optional) ``userid,cms_segid,cms_group_id,final_gender_code,age_level,
  pvalue_level,shopping_level,occupation,new_user_class_level``: ``user`` attrs JSON (empty → null).
* ``behavior_log.csv`` (optional; 700 M rows in the original) ``user,time_stamp,btag,cate,brand``:
  events ``user → category`` and ``user → brand`` with ``event_type`` = ``btag`` (``pv``,
  ``cart``, ``fav``, ``buy``).

Timestamps are unix seconds in [1990-01-01, 2100-01-01). Rejected rows: wrong field counts,
empty or non-integer ids, bad flags, prices or timestamps, unknown ``btag``, exact repeats, an
``adgroup_id`` or ``userid`` listed twice.

**The processed sample file** ``alimama_sampled_train.txt`` (a file, not a folder): 267
comma-separated numbers a line — ``[0:150]`` behaviour types, categories and brands of the 50
latest behaviours, ``[150:250]`` masks (validated as numbers, not turned into events: they carry
no times), ``[250:259]`` the user profile, ``[259:265]`` ``adgroup_id, cate_id, campaign_id,
customer, brand, price``, ``[265]`` pid, ``[266]`` clk. It has no timestamps, so line ``n`` gets
``SAMPLE_START + (n - 1) × 20 minutes`` with ``SAMPLE_START`` = 2017-05-06 00:00 UTC (500 lines
span about 7 days, like the 8-day original log); its click has the same time. Exact repeated
lines are rejected as duplicates.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hir.errors import SourceError
from hir.graph.sources.base import SourceBatch
from hir.graph.sources.validate import (
    Table,
    first_times,
    json_records,
    make_batch,
    read_table,
)
from hir.settings import Settings

SOURCE = "taobao_ads"
BEHAVIOURS = ("pv", "cart", "fav", "buy")
SAMPLE_START = pd.Timestamp("2017-05-06", tz="UTC")
SAMPLE_STEP = pd.Timedelta(minutes=20)
PROFILE = ["userid", "cms_segid", "cms_group_id", "final_gender_code", "age_level", "pvalue_level",
           "shopping_level", "occupation", "new_user_class_level"]
AD = ["adgroup_id", "cate_id", "campaign_id", "customer", "brand", "price"]
SAMPLE_COLUMNS = [f"hist_{i}" for i in range(250)] + PROFILE + AD + ["pid", "clk"]


def _frame(**columns) -> pd.DataFrame:
    return pd.DataFrame({k: (v.to_numpy() if isinstance(v, pd.Series) else v) for k, v in columns.items()})


def _ad_events(users: pd.Series, ads: pd.Series, ts: pd.Series, clicked: pd.Series) -> pd.DataFrame:
    """An impression per row and a click where ``clicked``, ``user → ad``."""
    shown = _frame(src_type="user", src_key=users, dst_type="ad", dst_key=ads, event_type="impression", ts=ts, value=1.0)
    clicks = shown[clicked.to_numpy()].assign(event_type="click")
    return pd.concat([shown, clicks], ignore_index=True)


def _ad_catalogue(ads: pd.DataFrame, events: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Ad entities (price attrs) and the ad/campaign relations, valid from each ad's first impression.

    ``events``: every event of the input; an ad never shown is valid from the earliest of them.
    """
    shown = events[events["dst_type"] == "ad"]
    first = first_times(shown["dst_key"], shown["ts"])
    start = events["ts"].min() if len(events) else pd.NaT
    since = ads["adgroup_id"].astype(object).map(first).fillna(start).astype("datetime64[ns, UTC]")
    ad_id = ads["adgroup_id"].astype(object)
    has_brand = ~ads["brand"].isin(["", "NULL"]).to_numpy()
    campaign_since = since.groupby(ads["campaign_id"].astype(object).to_numpy()).min()
    campaigns = ads.drop_duplicates(["campaign_id", "customer"])
    relations = pd.concat(
        [
            _frame(src_type="ad", src_key=ad_id, dst_type="campaign", dst_key=ads["campaign_id"], relation="in_campaign", valid_from=since),
            _frame(src_type="ad", src_key=ad_id, dst_type="category", dst_key=ads["cate_id"], relation="in_category", valid_from=since),
            _frame(src_type="ad", src_key=ad_id[has_brand], dst_type="brand", dst_key=ads["brand"][has_brand],
                   relation="of_brand", valid_from=since[has_brand]),
            _frame(src_type="campaign", src_key=campaigns["campaign_id"], dst_type="advertiser", dst_key=campaigns["customer"],
                   relation="of_advertiser", valid_from=campaigns["campaign_id"].astype(object).map(campaign_since)),
        ],
        ignore_index=True,
    )
    for column in ("src_key", "dst_key"):
        relations[column] = relations[column].astype(object)
    entities = _frame(entity_type="ad", source_key=ad_id, first_seen=since, attrs=json_records(ads[["price"]].astype(float)))
    return {"relations": relations, "entities": entities}


def _user_entities(profiles: pd.DataFrame) -> pd.DataFrame:
    attrs = pd.DataFrame(
        {c: pd.Series([int(v) if v else None for v in profiles[c].astype(object)], dtype=object) for c in PROFILE[1:]}
    )
    return _frame(entity_type="user", source_key=profiles["userid"].astype(object), first_seen=pd.NaT, attrs=json_records(attrs))


# ---- the four raw tables ---------------------------------------------------------------------


def _raw_sample(path: Path) -> Table:
    table = read_table(path, ["user", "time_stamp", "adgroup_id", "pid", "nonclk", "clk"], header=True, what="raw_sample table")
    table.reject_blank_lines()
    table.require(table.columns)
    table.ids(["user", "adgroup_id"])
    table.choice("clk", ("0", "1"), what="clk flag")
    table.choice("nonclk", ("0", "1"), what="nonclk flag")
    table.reject(table.frame["clk"] == table.frame["nonclk"], "clk and nonclk must differ; clk", quote="clk")
    table.timestamp("time_stamp", "ts")
    table.duplicates()
    return table


def _ad_feature(path: Path) -> Table:
    table = read_table(path, AD, header=True, what="ad_feature table")
    table.reject_blank_lines()
    table.require(["adgroup_id", "cate_id", "campaign_id", "customer", "price"])
    table.ids(["adgroup_id", "cate_id", "campaign_id", "customer"])
    table.match("brand", r"\d*|NULL", "brand")
    table.number("price", "price_value", 0.0)
    table.duplicates(["adgroup_id"], what="adgroup_id")
    return table


def _user_profile(path: Path) -> Table:
    table = read_table(path, PROFILE, header=True, what="user_profile table")
    table.reject_blank_lines()
    table.require(["userid"])
    for column in PROFILE:
        table.match(column, r"\d*", column)
    table.duplicates(["userid"], what="userid")
    return table


def _behavior_log(path: Path) -> Table:
    table = read_table(path, ["user", "time_stamp", "btag", "cate", "brand"], header=True, what="behavior_log table")
    table.reject_blank_lines()
    table.require(["user", "time_stamp", "btag", "cate"])
    table.ids(["user", "cate"])
    table.match("brand", r"\d*|NULL", "brand")
    table.choice("btag", BEHAVIOURS)
    table.timestamp("time_stamp", "ts")
    table.duplicates()
    return table


def _behaviour_events(rows: pd.DataFrame) -> pd.DataFrame:
    """``user → category`` and (where a brand is given) ``user → brand`` events of type ``btag``."""
    common = dict(src_type="user", src_key=rows["user"].astype(object), event_type=rows["btag"].astype(object), ts=rows["ts"], value=1.0)
    branded = ~rows["brand"].isin(["", "NULL"]).to_numpy()
    return pd.concat(
        [
            _frame(dst_type="category", dst_key=rows["cate"].astype(object), **common),
            _frame(dst_type="brand", dst_key=rows["brand"].astype(object), **common)[branded],
        ],
        ignore_index=True,
    )


def _read_folder(path: Path) -> SourceBatch:
    sample, ads = _raw_sample(path / "raw_sample.csv"), _ad_feature(path / "ad_feature.csv")
    tables, files = [sample, ads], [path / "raw_sample.csv", path / "ad_feature.csv"]
    s = sample.frame
    events = [_ad_events(s["user"].astype(object), s["adgroup_id"].astype(object), s["ts"], s["clk"] == "1")]
    users = []
    if (path / "user_profile.csv").exists():
        profiles = _user_profile(path / "user_profile.csv")
        tables.append(profiles)
        files.append(path / "user_profile.csv")
        users.append(_user_entities(profiles.frame))
    if (path / "behavior_log.csv").exists():
        behaviour = _behavior_log(path / "behavior_log.csv")
        tables.append(behaviour)
        files.append(path / "behavior_log.csv")
        events.append(_behaviour_events(behaviour.frame))
    events = pd.concat(events, ignore_index=True)
    ad_rows = ads.frame.assign(price=ads.frame["price_value"])
    catalogue = _ad_catalogue(ad_rows, events)
    entities = pd.concat([catalogue["entities"], *users], ignore_index=True)
    return make_batch(SOURCE, path, files, tables, events=events, relations=catalogue["relations"], entities=entities)


# ---- the processed sample --------------------------------------------------------------------


def _read_sample(path: Path) -> SourceBatch:
    table = read_table(path, SAMPLE_COLUMNS, header=False, what="Ali_Display_Ad_Click sample")
    table.reject_blank_lines()
    table.require(SAMPLE_COLUMNS[250:])
    for column in SAMPLE_COLUMNS[:259] + AD[:5] + ["pid"]:
        table.match(column, r"\d+", column)
    table.choice("clk", ("0", "1"), what="clk flag")
    table.number("price", "price_value")
    table.duplicates()
    rows = table.frame
    ts = SAMPLE_START + SAMPLE_STEP * (rows["_line"] - 1)
    events = _ad_events(rows["userid"].astype(object), rows["adgroup_id"].astype(object), ts, rows["clk"] == "1")
    ads = rows.drop_duplicates("adgroup_id").assign(price=lambda f: f["price_value"])
    catalogue = _ad_catalogue(ads, events)
    users = _user_entities(rows.drop_duplicates("userid"))
    entities = pd.concat([catalogue["entities"], users], ignore_index=True)
    return make_batch(SOURCE, path, [path], [table], salt="sample", events=events, relations=catalogue["relations"], entities=entities)


def read(path: Path, settings: Settings) -> SourceBatch:
    """Read the raw-table folder or the processed sample file ``path``; ``settings`` is unused."""
    if path.is_dir():
        return _read_folder(path)
    if path.is_file():
        return _read_sample(path)
    raise SourceError(f"{path}: not found (expected the folder of raw Ali_Display_Ad_Click tables or the processed sample file)")
