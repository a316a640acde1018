"""taobao_ads: the four raw Ali_Display_Ad_Click tables (a fixture in their documented schema) and the
processed 267-column sample in ../shared/data."""

import json

import pandas as pd
import pytest
from conftest import shared_data
from hir.errors import SourceError
from hir.graph.sources import read_source
from hir.graph.sources.taobao_ads import SAMPLE_START, SAMPLE_STEP
from hir.graph.warehouse import connect, load_batch, table_counts
from hir.settings import Settings

T0 = 1494201600  # 2017-05-08 00:00 UTC

# The documented schema of the Tianchi tables, with their real quirks: "NULL" brands, empty
# profile fields, the trailing space in user_profile's last header name, pids like 430548_1007.
RAW_SAMPLE = (
    "user,time_stamp,adgroup_id,pid,nonclk,clk\n"
    f"100,{T0},1,430548_1007,1,0\n"
    f"100,{T0 + 60},1,430548_1007,0,1\n"
    f"101,{T0 + 120},2,430539_1007,1,0\n"
    f"102,{T0 + 3600},3,430548_1007,0,1\n"
    f"102,{T0 + 7200},4,430548_1007,1,0\n"
)
AD_FEATURE = (
    "adgroup_id,cate_id,campaign_id,customer,brand,price\n"
    "1,6406,83237,1,95471,170.0\n"
    "2,6406,83237,1,NULL,199.0\n"
    "3,4520,387991,2,247789,6.5\n"
    "4,4520,387992,2,247789,39.9\n"
    "5,4280,387992,2,,9.9\n"
)
USER_PROFILE = (
    "userid,cms_segid,cms_group_id,final_gender_code,age_level,pvalue_level,shopping_level,occupation,new_user_class_level \n"
    "100,0,5,2,5,,3,0,3\n"
    "101,0,2,2,2,1,3,0,\n"
    "103,13,8,1,2,2,3,0,2\n"
)
BEHAVIOR_LOG = (
    "user,time_stamp,btag,cate,brand\n"
    f"100,{T0 - 86400},pv,6406,95471\n"
    f"100,{T0 - 3600},cart,6406,NULL\n"
    f"101,{T0 - 60},buy,4520,247789\n"
)
TABLES = {"raw_sample.csv": RAW_SAMPLE, "ad_feature.csv": AD_FEATURE, "user_profile.csv": USER_PROFILE,
          "behavior_log.csv": BEHAVIOR_LOG}


def write_raw_tables(folder, **overrides):
    """Write the four raw tables into ``folder``; ``overrides`` replace a table's text (None: leave it out)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in TABLES.items():
        text = overrides.get(name.removesuffix(".csv"), text)
        if text is not None:
            (folder / name).write_text(text)
    return folder


def _read(path):
    return read_source("taobao_ads", path, Settings.from_mapping({}))


def _ts(seconds):
    return pd.Timestamp(seconds, unit="s", tz="UTC")


def test_raw_tables_events_relations_and_profiles(tmp_path):
    batch = _read(write_raw_tables(tmp_path / "ads"))
    assert batch.rows_read == batch.rows_accepted == 5 + 5 + 3 + 3
    ev = batch.events
    assert ev["event_type"].value_counts().to_dict() == {"impression": 5, "click": 2, "pv": 2, "cart": 1, "buy": 2}
    clicks = ev[ev["event_type"] == "click"]
    assert set(zip(clicks["src_key"], clicks["dst_key"], clicks["ts"])) == {("100", "1", _ts(T0 + 60)), ("102", "3", _ts(T0 + 3600))}
    behaviour = ev[ev["event_type"].isin(["pv", "cart", "buy"])]
    assert set(zip(behaviour["dst_type"], behaviour["dst_key"], behaviour["event_type"])) == {
        ("category", "6406", "pv"), ("brand", "95471", "pv"), ("category", "6406", "cart"),
        ("category", "4520", "buy"), ("brand", "247789", "buy"),
    }
    rel = batch.relations
    edges = set(zip(rel["src_type"], rel["src_key"], rel["relation"], rel["dst_type"], rel["dst_key"]))
    assert ("ad", "1", "in_campaign", "campaign", "83237") in edges
    assert ("campaign", "83237", "of_advertiser", "advertiser", "1") in edges
    assert ("ad", "3", "in_category", "category", "4520") in edges
    assert ("ad", "3", "of_brand", "brand", "247789") in edges
    assert not any(e[2] == "of_brand" and e[1] in {"2", "5"} for e in edges)  # NULL / empty brand
    valid = rel.set_index(["src_key", "relation"])["valid_from"]
    assert valid[("1", "in_campaign")] == _ts(T0)  # first impression of ad 1
    assert valid[("5", "in_campaign")] == _ts(T0 - 86400)  # never shown: the log's first time
    assert valid[("387992", "of_advertiser")] == _ts(T0 - 86400)  # earliest of its ads (4: T0+7200, 5)
    users = batch.entities[batch.entities["entity_type"] == "user"].set_index("source_key")["attrs"]
    assert json.loads(users["100"]) == {"cms_segid": 0, "cms_group_id": 5, "final_gender_code": 2, "age_level": 5,
                                        "pvalue_level": None, "shopping_level": 3, "occupation": 0, "new_user_class_level": 3}
    ads = batch.entities[batch.entities["entity_type"] == "ad"].set_index("source_key")["attrs"]
    assert json.loads(ads["3"]) == {"price": 6.5}


def test_bad_rows_in_every_table(tmp_path):
    folder = write_raw_tables(
        tmp_path / "ads",
        raw_sample=RAW_SAMPLE + f"103,{T0},1,430548_1007,1,1\n103,later,1,p,1,0\n103,{T0},9,p,2,0\n100,{T0},1,430548_1007,1,0\n103,{T0},1\n",
        ad_feature=AD_FEATURE + "1,1,1,1,1,1.0\n6,1,1,1,1,cheap\n7,,1,1,1,1.0\n",
        user_profile=USER_PROFILE + "104,x,1,1,1,1,1,1,1\n100,0,5,2,5,,3,0,3\n",
        behavior_log=BEHAVIOR_LOG + f"100,{T0},click,6406,1\n100,0,pv,6406,1\n",
    )
    batch = _read(folder)
    reasons = dict(zip(batch.rejected["location"], batch.rejected["reason"]))
    assert reasons == {
        "raw_sample.csv:7": "clk and nonclk must differ; clk '1'",
        "raw_sample.csv:8": "malformed timestamp (unix_s) 'later'",
        "raw_sample.csv:9": "unknown nonclk flag '2' (expected one of 0, 1)",
        "raw_sample.csv:10": "duplicate row of raw_sample.csv:2",
        "raw_sample.csv:11": "expected 6 fields, found 3",
        "ad_feature.csv:7": "duplicate adgroup_id of ad_feature.csv:2",
        "ad_feature.csv:8": "malformed price 'cheap'",
        "ad_feature.csv:9": "missing field cate_id",
        "user_profile.csv:5": "malformed cms_segid 'x'",
        "user_profile.csv:6": "duplicate userid of user_profile.csv:2",
        "behavior_log.csv:5": "unknown event type 'click' (expected one of pv, cart, fav, buy)",
        "behavior_log.csv:6": "timestamp outside [1990-01-01T00:00:00+00:00, 2100-01-01T00:00:00+00:00): '0'",
    }
    assert batch.rows_accepted == 16 and batch.rows_read == 16 + len(reasons)


def test_missing_and_broken_tables(tmp_path):
    folder = write_raw_tables(tmp_path / "a", ad_feature=None)
    with pytest.raises(SourceError) as err:
        _read(folder)
    assert str(err.value) == f"{folder / 'ad_feature.csv'}: ad_feature table not found"
    optional = write_raw_tables(tmp_path / "b", user_profile=None, behavior_log=None)
    assert _read(optional).rows_read == 10  # user_profile and behavior_log are optional
    wrong = write_raw_tables(tmp_path / "c", raw_sample=RAW_SAMPLE.replace(",", "\t"))
    with pytest.raises(SourceError, match=r"raw_sample\.csv: wrong delimiter: expected ','-separated fields, the first line is separated by '\\t'$"):
        _read(wrong)
    headless = write_raw_tables(tmp_path / "d", raw_sample=RAW_SAMPLE.split("\n", 1)[1])
    with pytest.raises(SourceError, match=r"raw_sample\.csv: no header line with columns user, time_stamp"):
        _read(headless)
    empty = write_raw_tables(tmp_path / "e", behavior_log="")
    with pytest.raises(SourceError, match=r"behavior_log\.csv: behavior_log table is empty$"):
        _read(empty)
    with pytest.raises(SourceError, match=r"nowhere: not found \(expected the folder"):
        _read(tmp_path / "nowhere")


def test_processed_sample_entity_structure():
    batch = _read(shared_data("taobao_ad_sample") / "alimama_sampled_train.txt")
    assert batch.rows_read == 500
    # The sample repeats rows (clicks are over-sampled); the repeats are rejected as duplicates.
    assert len(batch.rejected) == 196 and batch.rejected["reason"].str.startswith("duplicate row of ").all()
    assert batch.rows_accepted == 304
    counts = batch.events["event_type"].value_counts().to_dict()
    assert counts == {"impression": 304, "click": 14}
    assert batch.events["ts"].min() == SAMPLE_START
    assert batch.events["ts"].max() <= SAMPLE_START + 499 * SAMPLE_STEP
    kinds = {r: set(zip(batch.relations.loc[batch.relations.relation == r, "src_type"],
                        batch.relations.loc[batch.relations.relation == r, "dst_type"])) for r in set(batch.relations.relation)}
    assert kinds == {"in_campaign": {("ad", "campaign")}, "of_advertiser": {("campaign", "advertiser")},
                     "in_category": {("ad", "category")}, "of_brand": {("ad", "brand")}}
    users = batch.entities[batch.entities["entity_type"] == "user"]
    assert users["source_key"].nunique() == len(users) == 230
    assert set(json.loads(users["attrs"].iloc[0])) == {"cms_segid", "cms_group_id", "final_gender_code", "age_level",
                                                       "pvalue_level", "shopping_level", "occupation", "new_user_class_level"}


def test_sample_timestamps_follow_line_numbers(tmp_path):
    row = ["1"] * 250 + ["7", "1", "1", "1", "1", "1", "1", "0", "1"] + ["11", "12", "13", "14", "15", "0.5", "1"]
    other = row[:259] + ["21"] + row[260:265] + ["0", "0"]
    path = tmp_path / "sample.txt"
    path.write_text(",".join(row + ["1"]) + "\n" + ",".join(row + ["x"]) + "\n" + ",".join(other) + "\n")
    batch = _read(path)
    assert batch.rejected.to_dict("records")[0]["reason"] == "unknown clk flag 'x' (expected one of 0, 1)"
    shown = batch.events[batch.events["event_type"] == "impression"].set_index("dst_key")["ts"]
    assert shown["11"] == SAMPLE_START and shown["21"] == SAMPLE_START + 2 * SAMPLE_STEP
    assert len(batch.events[batch.events["event_type"] == "click"]) == 1


def test_loading_twice_adds_nothing(tmp_path):
    folder = write_raw_tables(tmp_path / "ads")
    with connect(tmp_path / "w.duckdb") as con:
        load_batch(con, _read(folder))
        counts = table_counts(con)
        assert load_batch(con, _read(folder)).skipped
        assert table_counts(con) == counts
    assert counts["events"] == 12
    assert counts["entities"] == 4 + 5 + 3 + 2 + 3 + 2  # users, ads, campaigns, advertisers, categories, brands
