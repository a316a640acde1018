"""Ranker examples, features and metrics (hir.evaluation.rankers) and token-quality figures (hir.evaluation.token_quality)."""

import math

import numpy as np
import pandas as pd
from hir.evaluation.rankers import (
    base_features,
    binary_metrics,
    embedding_lookup,
    evaluate_rankers,
    hir_features,
    window_examples,
)
from hir.evaluation.token_quality import collapse, purity

IMP, CLICK = frozenset({"impression"}), frozenset({"click"})


def _events(rows):
    return pd.DataFrame(rows, columns=["user_key", "item_key", "item_type", "event_type", "t"])


def test_examples_are_first_exposures_labelled_by_a_later_positive():
    ev = _events([("u1", "a", "ad", "impression", 10), ("u1", "a", "ad", "impression", 12), ("u1", "a", "ad", "click", 13),
                  ("u2", "a", "ad", "click", 5), ("u2", "a", "ad", "impression", 20), ("u3", "b", "ad", "impression", 30),
                  ("u3", "b", "ad", "click", 99)])
    got = window_examples(ev, 0, 50, IMP, CLICK).set_index("user_key")
    assert got.loc["u1", "t"] == 10 and got.loc["u1", "label"] == 1
    assert got.loc["u2", "label"] == 0, "a click before the impression is no label"
    assert got.loc["u3", "label"] == 0, "a click outside the window is no label"


def test_base_features_use_history_only():
    history = _events([("u1", "a", "ad", "impression", 1), ("u1", "a", "ad", "click", 2), ("u2", "a", "ad", "impression", 3)])
    examples = _events([("u1", "a", "ad", "impression", 10), ("u9", "z", "ad", "impression", 11)]).assign(label=[1, 0])
    f = base_features(examples, history, IMP, CLICK, cutoff=86_400.0 + 2)
    assert f.loc[0, "item_key_exposures"] == 2 and f.loc[0, "item_key_positives"] == 1
    assert f.loc[0, "user_key_rate"] == (1 + 1) / (1 + 10) and f.loc[0, "pair_exposures"] == 1
    assert f.loc[0, "user_key_days_since"] == 1.0 and f.loc[1, "user_key_days_since"] == -1.0


def test_binary_metrics_normalised_entropy_is_one_for_the_base_rate():
    y = np.array([0, 0, 0, 1])
    m = binary_metrics(y, np.full(4, 0.25))
    assert math.isclose(m["ne"], 1.0, rel_tol=1e-6) and m["auc"] == 0.5
    assert binary_metrics(y, np.array([0.1, 0.2, 0.1, 0.9]))["auc"] == 1.0


def test_hir_features_dot_and_coarse_match():
    frame = pd.DataFrame({"user_vec": [np.array([1.0, 0.0]), None], "item_vec": [np.array([2.0, 0.0]), np.array([0.0, 1.0])],
                          "user_coarse": [3.0, np.nan], "item_coarse": [3.0, 1.0]})
    f, pca = hir_features(frame)
    assert f.loc[0, "hir_dot"] == 2.0 and f.loc[0, "hir_cosine"] == 1.0 and np.isnan(f.loc[1, "hir_dot"])
    assert f["hir_coarse_match"].tolist() == [1.0, 0.0] and pca is not None


def test_rankers_learn_a_planted_match_and_say_not_applicable_without_outcomes():
    rng = np.random.default_rng(0)
    day = 86_400.0
    rows, vectors = [], {}
    for u in range(60):
        vectors[("user", f"u{u}")] = np.eye(2)[u % 2]
    for a in range(10):
        vectors[("ad", f"a{a}")] = np.eye(2)[a % 2]
    for window in (0, 1):
        for u in range(60):
            for a in rng.choice(10, 4, replace=False):
                t = (window + 0.5) * day + rng.random() * 100
                rows.append((f"u{u}", f"a{a}", "ad", "impression", t))
                if u % 2 == a % 2 and rng.random() < 0.7:
                    rows.append((f"u{u}", f"a{a}", "ad", "click", t + 1))
    ev = _events(rows)
    emb = pd.DataFrame([(t, k, v, int(np.argmax(v))) for (t, k), v in vectors.items()],
                       columns=["entity_type", "source_key", "embedding", "coarse_prototype"])
    got = evaluate_rankers(ev, {"cutoff": 0.0, "test_start": day, "test_end": 2 * day}, embedding_lookup(emb), seed=0)
    assert got["click"]["status"] == "ok" and got["click"]["with_hir"]["auc"] > 0.8
    assert got["click"]["with_hir"]["auc"] > got["click"]["base"]["auc"]
    assert got["conversion"]["status"] == "not applicable"


def test_collapse_and_purity():
    c = collapse(np.array([0, 0, 0, 1]))
    assert c == {"top_share": 0.75, "used": 2, "sizes": [3, 1]}
    assert purity(np.array([0, 0, 1, 1]), np.array(["x", "y", "z", "z"])) == 0.75


def test_partition_split_tests_on_the_test_window_only(settings):
    from datetime import datetime, timezone

    from hir.evaluation.data import partition_split
    from hir.evaluation.scorers import tuning_queries
    from hir.graph.warehouse import connect

    cutoff = datetime(2026, 1, 3, tzinfo=timezone.utc)
    with connect(settings.warehouse_path) as con:
        con.executemany("INSERT INTO entities (entity_id, entity_type, source_key) VALUES (?, ?, ?)", [(1, "user", "u1"), (2, "user", "u2"), (10, "product", "p1"),
                                                                   (11, "product", "p2"), (12, "product", "p3")])
        con.executemany("INSERT INTO events (src, dst, event_type, ts, value) VALUES (?, ?, 'like', ?, 1.0)", [
            (1, 10, datetime(2026, 1, 1, tzinfo=timezone.utc)), (2, 10, datetime(2026, 1, 2, tzinfo=timezone.utc)),
            (1, 11, datetime(2026, 1, 3, 5, tzinfo=timezone.utc)),  # validation window: no scorer trains on it
            (2, 12, datetime(2026, 1, 4, 5, tzinfo=timezone.utc))])  # test window
    with connect(settings.warehouse_path, read_only=True) as con:
        split = partition_split(con, cutoff, settings)
    assert split.info["target_events"] == ["like"], "no purchases: the most frequent user event"
    assert len(split.test.users) == 1 and split.user_keys[split.test.users[0]] == "u2"
    assert split.item_keys[int(split.test.targets[0, 0])] == "p3" and split.info["cold_start_queries"] == 1
    assert split.train.n_items == 3 and sorted(split.test.history.items.tolist()) == [0, 0]  # p1 twice: before T only
    # the validation window's event is the window validation query, with the same history as the test
    window = split.window_validation
    assert split.user_keys[window.users].tolist() == ["u1"] and split.item_keys[int(window.targets[0, 0])] == "p2"
    assert window.history is split.test.history and tuning_queries(split) is window

