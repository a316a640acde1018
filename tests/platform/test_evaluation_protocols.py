"""The evaluation protocols: exact leave-last-two-out split, the temporal split with its cold-start
slice, fitting and scoring on a split, and a small end-to-end ``hir eval amazon_seq`` run."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from hir.errors import SourceError
from hir.evaluation import protocols
from hir.models.baselines.base import RandomScorer, Scorer
from hir.models.baselines.popularity import PopularityScorer

pytestmark = pytest.mark.usefixtures("one_thread")


def test_leave_last_out_is_exactly_last_two():
    users = ["u1", "u2", "u3"]
    seqs = [["10", "11", "12", "13"], ["11", "12", "14"], ["13", "10"]]
    split = protocols.leave_last_out(users, seqs)
    keys = list(split.item_keys)
    idx = lambda items: [keys.index(i) for i in items]  # noqa: E731
    train_seqs = split.train.sequences()
    got = [train_seqs[1][train_seqs[0][u] : train_seqs[0][u + 1]].tolist() for u in range(3)]
    assert got == [idx(["10", "11"]), idx(["11"]), []]
    # validation: users with >= 3 items, target second to last, earlier items masked
    assert split.validation.users.tolist() == [0, 1]
    assert split.validation.targets[:, 0].tolist() == idx(["12", "12"])
    val_ex = split.validation.exclude_indices[split.validation.exclude_indptr[0] : split.validation.exclude_indptr[1]]
    assert val_ex.tolist() == idx(["10", "11"])
    # test: every user with >= 2 items, target last, history and mask = all earlier items
    assert split.test.users.tolist() == [0, 1, 2]
    assert split.test.targets[:, 0].tolist() == idx(["13", "14", "10"])
    ex = split.test.exclude_indptr
    assert [split.test.exclude_indices[ex[q] : ex[q + 1]].tolist() for q in range(3)] == [
        idx(["10", "11", "12"]), idx(["11", "12"]), idx(["13"])]
    hist = split.test.history.sequences()
    assert hist[1][hist[0][0] : hist[0][1]].tolist() == idx(["10", "11", "12"])


def test_sequence_file_errors_name_file_and_line(tmp_path):
    path = tmp_path / "Bad.txt"
    path.write_text("1 5 6\n2\n")
    with pytest.raises(SourceError, match=r"Bad.txt:2: user '2' has no items"):
        protocols.amazon_split(path)
    with pytest.raises(SourceError, match="not found"):
        protocols.amazon_split(tmp_path / "missing.txt")


def test_amazon_item_text_from_datamaps(tmp_path):
    (tmp_path / "Tiny.txt").write_text("1 1 2 3\n2 2 3 1\n")
    (tmp_path / "tiny_datamaps.json").write_text(json.dumps({"item2id": {"A1": "1", "A2": "2", "A3": "3"}}))
    (tmp_path / "tiny_item_textual_ids.txt").write_text("A1 red lipstick\nA3 blue shampoo\n")
    split = protocols.amazon_split(tmp_path)
    assert split.info["dataset"] == "tiny"
    assert split.item_text == ["red lipstick", None, "blue shampoo"]


def frames():
    day = pd.Timestamp("2024-01-01", tz="UTC")
    rows = [  # user, item, event, day offset, value
        ("a", "p1", "view", 0, 1.0), ("a", "p2", "view", 1, 1.0), ("a", "p2", "buy", 1.5, 1.0),
        ("b", "p1", "view", 0.5, 1.0), ("b", "p3", "view", 2, 1.0),
        ("a", "p3", "buy", 5.2, 1.0), ("b", "p4", "buy", 5.5, 1.0), ("b", "p1", "view", 5.6, 1.0),
        ("c", "p2", "buy", 5.7, 1.0),
    ]
    events = pd.DataFrame({
        "src_type": "user", "src_key": [r[0] for r in rows], "dst_type": "product", "dst_key": [r[1] for r in rows],
        "event_type": [r[2] for r in rows], "ts": [day + pd.Timedelta(days=r[3]) for r in rows], "value": [r[4] for r in rows],
    })
    entities = pd.DataFrame({"entity_type": ["product"] * 5 + ["user"], "source_key": ["p1", "p2", "p3", "p4", "p5", "a"]})
    content = pd.DataFrame({"entity_type": "product", "source_key": ["p1", "p4"], "text": ["soap", "towel"], "image_uri": None})
    return events, entities, content


def test_temporal_split_windows_targets_and_cold_start():
    events, entities, content = frames()
    target = protocols.TemporalTarget(frozenset({"buy"}))
    cutoff = pd.Timestamp("2024-01-06", tz="UTC").timestamp()
    split = protocols.temporal_split(events, entities, content, target, cutoff=cutoff)
    keys = list(split.item_keys)
    assert keys == ["p1", "p2", "p3", "p4", "p5"]  # every product is a candidate, p5 never seen
    assert (split.test.history.times < cutoff).all() and len(split.test.history) == 5
    users = list(split.user_keys)
    test = {users[u]: sorted(keys[i] for i in t[t >= 0].tolist()) for u, t in zip(split.test.users, split.test.targets)}
    assert test == {"a": ["p3"], "b": ["p4"], "c": ["p2"]}  # only buys after the cut-off; views are not targets
    cold = split.slices["cold_start"]
    assert [users[u] for u in cold.users] == ["b"] and keys[int(cold.targets[0, 0])] == "p4"
    # validation holds out each user's last training event; training keeps the rest
    assert len(split.train) + len(split.validation.users) == len(split.test.history)
    assert split.item_text == ["soap", None, None, "towel", None]
    assert split.info["cold_start_queries"] == 1 and split.info["masking"] == "none"


def test_temporal_split_min_value_and_masking():
    events, entities, content = frames()
    events["event_type"], events["value"] = "rating", 5.0
    events.loc[events["dst_key"] == "p4", "value"] = 2.0
    target = protocols.TemporalTarget(frozenset({"rating"}), min_value=4.0, mask_seen=True)
    split = protocols.temporal_split(events, entities, content, target, cutoff=pd.Timestamp("2024-01-06", tz="UTC").timestamp())
    users = list(split.user_keys)
    targets = {users[u]: sorted(split.item_keys[t[t >= 0].numpy()]) for u, t in zip(split.test.users, split.test.targets)}
    assert targets == {"a": ["p3"], "b": ["p1"], "c": ["p2"]}  # b's rating 2 of p4 is not a target
    row = list(split.test.users).index(users.index("a"))
    masked = split.test.exclude_indices[split.test.exclude_indptr[row] : split.test.exclude_indptr[row + 1]]
    assert sorted(split.item_keys[masked]) == ["p1", "p2"]


def test_no_targets_is_a_clear_error():
    events, entities, content = frames()
    with pytest.raises(SourceError, match="no purchase events"):
        protocols.temporal_split(events, entities, content, protocols.TemporalTarget(frozenset({"purchase"})))


class OracleScorer(Scorer):
    """Knows the answer: 1 on each query user's test targets, 0 elsewhere."""

    name = "oracle"

    def __init__(self, queries):
        self.answers = {int(u): t[t >= 0].tolist() for u, t in zip(queries.users, queries.targets)}

    def score(self, users, history):
        scores = torch.zeros(len(users), history.n_items)
        for row, user in enumerate(users):
            scores[row, self.answers.get(int(user), [])] = 1.0
        return scores


def test_run_scorers_oracle_is_perfect_and_popularity_matches_a_hand_count():
    events, entities, content = frames()
    split = protocols.temporal_split(events, entities, content, protocols.TemporalTarget(frozenset({"buy"})),
                                      cutoff=pd.Timestamp("2024-01-06", tz="UTC").timestamp())
    results = protocols.run_scorers(split, {"oracle": lambda: OracleScorer(split.test), "popularity": PopularityScorer,
                                             "random": lambda: RandomScorer(seed=0)}, ks=(2,))
    oracle, popular = results["oracle"], results["popularity"]
    assert (oracle["recall@2"], oracle["ndcg@2"], oracle["mrr"], oracle["queries"]) == (1.0, 1.0, 1.0, 3)
    assert oracle["cold_start"]["recall@2"] == 1.0 and oracle["cold_start"]["queries"] == 1
    # Training (each user's last event before the cut-off held out): a: p1, p2; b: p1. Popularity
    # ranks p1 (2), p2 (1), then p3, p4, p5 tied at 0 (each rank 3, 4 or 5 with equal chance).
    # Targets: a → p3 and b → p4 (tied), c → p2 (rank 2).
    tied_rr = (1 / 3 + 1 / 4 + 1 / 5) / 3
    assert popular["recall@2"] == pytest.approx(1 / 3, abs=1e-6)
    assert popular["ndcg@2"] == pytest.approx(1 / np.log2(3) / 3, abs=1e-6)
    assert popular["mrr"] == pytest.approx((1 / 2 + 2 * tied_rr) / 3, abs=1e-6)
    assert popular["cold_start"]["recall@2"] == 0.0  # p4, the cold-start target, was never seen
    assert results["random"]["queries"] == 3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_test_or_validation_interaction_is_in_training(seed):
    rng = np.random.default_rng(seed)
    seqs = [[str(i) for i in rng.integers(0, 30, rng.integers(1, 9))] for _ in range(40)]
    split = protocols.leave_last_out([f"u{n}" for n in range(40)], seqs)
    keys = list(split.item_keys)
    indptr, items = split.train.sequences()
    test_users, val_users = split.test.users.tolist(), split.validation.users.tolist()
    for u, seq in enumerate(seqs):
        index = [keys.index(i) for i in seq]
        assert items[indptr[u] : indptr[u + 1]].tolist() == index[:-2]  # training stops two items before the end
        if len(seq) >= 2:
            assert split.test.targets[test_users.index(u), 0].item() == index[-1]
        if len(seq) >= 3:
            assert split.validation.targets[val_users.index(u), 0].item() == index[-2]
    events, entities, content = frames()
    cutoff = pd.Timestamp("2024-01-06", tz="UTC").timestamp()
    temporal = protocols.temporal_split(events, entities, content, protocols.TemporalTarget(frozenset({"buy"})), cutoff=cutoff)
    assert (temporal.train.times < cutoff).all() and (temporal.test.history.times < cutoff).all()
    held = set(zip(temporal.validation.users.tolist(), temporal.validation.targets[:, 0].tolist()))
    train_events = set(zip(temporal.train.users.tolist(), temporal.train.items.tolist(), temporal.train.times.tolist()))
    history_events = set(zip(temporal.test.history.users.tolist(), temporal.test.history.items.tolist(), temporal.test.history.times.tolist()))
    assert len(history_events - train_events) == len(held)  # exactly the held-out events left training


def write_tiny_beauty(folder, users=80, items=60, seed=0):
    """A Beauty-format copy: users follow item chains (item k then k+1) within 4 groups."""
    rng = np.random.default_rng(seed)
    lines = []
    for user in range(1, users + 1):
        group, start = rng.integers(0, 4), rng.integers(0, items // 4)
        seq = [group * (items // 4) + (start + j) % (items // 4) + 1 for j in range(rng.integers(5, 9))]
        lines.append(" ".join(map(str, [user] + seq)))
    (folder / "Beauty.txt").write_text("\n".join(lines) + "\n")


def test_beating_every_baseline_needs_both_metrics_strictly_above_each():
    baselines = {"a": {"recall@10": 0.2, "ndcg@10": 0.1}, "b": {"recall@10": 0.1, "ndcg@10": 0.2}}
    hir = {"hir": {"recall@10": 0.3, "ndcg@10": 0.3}, "hir_recent": {"recall@10": 0.3, "ndcg@10": 0.2},
           "hir_bom": {"recall@10": 0.15, "ndcg@10": 0.25}}
    assert protocols.beating_every_baseline(hir, baselines) == ["hir"]  # a tie is not a win
    assert protocols.beating_every_baseline(hir, {}) == ["hir", "hir_bom", "hir_recent"]


def test_hir_eval_amazon_seq_end_to_end(tmp_path, data_home, capsys):
    from hir.cli.main import main

    write_tiny_beauty(tmp_path)
    code = main(["eval", "amazon_seq", "--path", str(tmp_path), "--json", "--seed", "3", "--max-epochs", "3", "--no-hir"])
    assert code == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["dataset"] == "amazon_beauty" and report["seed"] == 3
    assert report["hir"] == "not run" and report["recall@10"] is None and report["headline"] is None
    assert report["seeds"] == [3] and "recall@10_std" not in report["baselines"]["sasrec"]  # one seed: plain rows
    assert set(report["baselines"]) == {"popularity", "cooccurrence", "als", "lightgcn", "sasrec"}
    assert report["skipped"] == {"text_world_knowledge": "the source has no item text"}
    for figures in report["baselines"].values():
        assert set(figures) >= {"recall@5", "ndcg@5", "recall@10", "ndcg@10"} and figures["queries"] == 80
    assert report["baselines"]["cooccurrence"]["recall@10"] > 0.5  # the planted chains
    assert report["settings"]["sasrec"]["loss"] == "full cross-entropy"
    assert 1 <= report["baselines"]["sasrec"]["epochs"] <= 3 and 1 <= report["baselines"]["lightgcn"]["epochs"] <= 3


def test_hir_eval_seeds_report_the_sequence_family_mean_and_std_and_hir_heads(tmp_path, data_home, monkeypatch, capsys):
    """``--seeds 2`` on leave-last-out with hir_seq: each family row's mean and sample std are those
    of the family's figures computed separately at each seed; the top-level figures are hir's."""
    from hir.cli.commands import eval as eval_command
    from hir.cli.main import main
    from hir.evaluation import scorers
    from hir.models.baselines.cooccurrence import CooccurrenceScorer
    from hir.settings import Settings

    write_tiny_beauty(tmp_path)
    monkeypatch.setenv("HIR_THREADS", "1")
    hir_items = np.random.default_rng(0).normal(size=(60, 8))
    monkeypatch.setattr(eval_command, "_pipeline", lambda *a: {"settings": Settings.from_env(), "partition": "2015-01-01"})
    monkeypatch.setattr(scorers, "hir_factories", lambda *a: {"hir": PopularityScorer, "hir_recent": CooccurrenceScorer})
    monkeypatch.setattr(scorers, "hir_item_table", lambda *a: hir_items)
    code = main(["eval", "amazon_seq", "--path", str(tmp_path), "--json", "--seed", "3", "--seeds", "2",
                 "--max-epochs", "1", "--baselines", "popularity,sasrec"])
    assert code == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["headline"] == "hir" and report["headline_rule"] == scorers.HEADLINE_RULE
    assert report["recall@10"] == report["hir"]["hir"]["recall@10"] and report["ndcg@5"] == report["hir"]["hir"]["ndcg@5"]
    assert list(report["hir"]) == ["hir", "hir_recent", "hir_seq"]
    assert list(report["baselines"]) == ["popularity", "sasrec", "sasrec_als"]
    assert report["skipped"] == {"sasrec_text": "the source has no item text"}
    assert report["seeds"] == [3, 4] and report["repeated_over_seeds"] == ["sasrec", "hir_seq", "sasrec_als"]
    assert "recall@10_std" not in report["baselines"]["popularity"]  # the rest runs once
    split = protocols.amazon_split(tmp_path)
    family_at, _ = scorers.sequence_family(split, Settings.from_env(), 3, 1, hir_items)
    separate = [protocols.run_scorers(split, family_at(seed), ks=(5, 10)) for seed in (3, 4)]
    rows = {**report["baselines"], **report["hir"]}
    for name in ("sasrec", "hir_seq", "sasrec_als"):
        assert rows[name]["seeds"] == [3, 4] and rows[name]["queries"] == 80
        for metric in ("recall@5", "ndcg@5", "recall@10", "ndcg@10"):
            figures = [run[name][metric] for run in separate]
            assert rows[name][metric] == pytest.approx(np.mean(figures), abs=1e-6), (name, metric)
            assert rows[name][f"{metric}_std"] == pytest.approx(np.std(figures, ddof=1), abs=1e-6), (name, metric)
    assert any(rows["sasrec"][f"{m}_std"] > 0 for m in ("recall@10", "ndcg@10"))  # the seeds differ
    # the paired comparisons: per query, each family member's figure is its mean over the seeds
    assert set(report["diff_ci"]) == {"hir_minus_popularity", "hir_minus_sasrec", "hir_minus_sasrec_als",
                                      "hir_seq_minus_sasrec", "hir_seq_minus_sasrec_als"}
    for name, (a, b) in {"hir_seq_minus_sasrec": ("hir_seq", "sasrec"), "hir_minus_sasrec_als": ("hir", "sasrec_als")}.items():
        for metric in ("recall@10", "ndcg@10"):
            assert report["diff"][name][metric] == pytest.approx(rows[a][metric] - rows[b][metric], abs=2e-6)
            low, high = report["diff_ci"][name][metric]
            assert low <= report["diff"][name][metric] <= high


def test_paired_differences_only_between_scorers_of_the_same_queries():
    rng = np.random.default_rng(0)
    hits = {name: {"recall@10": rng.uniform(size=n), "ndcg@10": rng.uniform(size=n)}
            for name, n in (("hir", 300), ("als", 300), ("stale", 250))}
    pairs = {"hir_minus_als": ("hir", "als"), "hir_minus_stale": ("hir", "stale"), "hir_minus_lightgcn": ("hir", "lightgcn")}
    paired = protocols.paired_differences(hits, pairs)
    assert set(paired["diff"]) == set(paired["diff_ci"]) == {"hir_minus_als"}
    assert paired["diff"]["hir_minus_als"]["ndcg@10"] == pytest.approx(hits["hir"]["ndcg@10"].mean() - hits["als"]["ndcg@10"].mean(), abs=1e-6)
    frame = protocols.per_query_frame(hits)
    assert len(frame) == 850 and all(np.array_equal(protocols.per_query_of(frame)[n][m], hits[n][m]) for n in hits for m in hits[n])


def test_hir_eval_refuses_missing_path_and_unknown_baseline(data_home, capsys):
    from hir.cli.main import main

    assert main(["eval", "amazon_seq"]) == 2
    assert main(["eval", "synthetic", "--baselines", "popularity,magic"]) == 2
    assert "unknown magic" in capsys.readouterr().err
    assert main(["eval", "synthetic", "--seeds", "0"]) == 2


def test_unix_seconds_whatever_the_resolution():
    ts = pd.Series(pd.to_datetime(["2026-01-01T00:00:10"]).astype("datetime64[s]")).dt.tz_localize("UTC")
    assert protocols._unix_seconds(ts).tolist() == [pd.Timestamp("2026-01-01T00:00:10", tz="UTC").timestamp()]


def test_hir_eval_synthetic_temporal(data_home, monkeypatch, capsys):
    from hir.cli.main import main

    monkeypatch.setenv("HIR_SYNTHETIC_EVENTS", "20000")
    code = main(["eval", "synthetic", "--json", "--baselines", "popularity,cooccurrence,als", "--no-hir"])
    assert code == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    protocol = report["protocol"]
    assert protocol["protocol"] == "temporal" and protocol["target_events"] == ["purchase"]
    assert protocol["cutoff"].startswith("2026-01") and protocol["train_interactions"] > 0
    for figures in report["baselines"].values():
        assert set(figures) >= {"recall@10", "recall@50", "ndcg@10", "mrr", "cold_start"}
    assert report["baselines"]["cooccurrence"]["recall@50"] > report["baselines"]["popularity"]["recall@10"]
