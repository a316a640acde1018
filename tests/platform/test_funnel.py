"""The deep-funnel conversion ranker (hir.evaluation.funnel, hir.evaluation.bootstrap, ranker_eval, hir eval funnel)."""

from datetime import datetime, timedelta, timezone

import dagster as dg
import numpy as np
import pandas as pd
import pytest
from hir.cli.bench.feast import write_fake_upstream
from hir.evaluation import funnel
from hir.evaluation.bootstrap import ScoredSet, _ArmScorer, bootstrap_arms
from hir.partitions import cutoff_of
from hir.serving.feast_store import FeastStore, write_feature_tables
from hir.storage import Artifacts, atomic_dir

STAGES = funnel.parse_stages("view<cart,fav<buy")
DAY = 86_400.0
PARTITIONS = ("2026-01-05", "2026-01-06", "2026-01-07")
USERS, ITEMS = 40, 30


def _events(rows):
    return pd.DataFrame(rows, columns=["user_key", "item_key", "item_type", "event_type", "t"])


def test_examples_expose_at_the_lowest_stage_and_label_later_purchases_only():
    ev = _events([("u1", "p1", "product", "view", 10), ("u1", "p1", "product", "cart", 12), ("u1", "p1", "product", "buy", 13),
                  ("u2", "p1", "product", "buy", 5), ("u2", "p1", "product", "cart", 20),
                  ("u3", "p2", "product", "fav", 30), ("u3", "p2", "product", "buy", 99),
                  ("u4", "p3", "product", "buy", 15),
                  ("u5", "p4", "product", "cart", 40), ("u5", "p4", "product", "view", 45), ("u5", "p4", "product", "buy", 47)])
    got = funnel.funnel_examples(ev, 0, 50, STAGES).set_index("user_key")
    assert list(got.index) == ["u1", "u2", "u3", "u5"], "a purchase without an upper stage is no example"
    assert (got.loc["u1", "t"], got.loc["u1", "stage"], got.loc["u1", "label"]) == (10, 0, 1)
    assert (got.loc["u2", "t"], got.loc["u2", "stage"], got.loc["u2", "label"]) == (20, 1, 0), "bought before the cart"
    assert got.loc["u3", "label"] == 0, "the purchase falls outside the window"
    assert (got.loc["u5", "t"], got.loc["u5", "label"]) == (45, 1), "exposed at the view, the lowest stage"


def test_no_example_is_labelled_by_a_purchase_before_its_exposure():
    rng = np.random.default_rng(3)
    n = 3000
    ev = _events(list(zip(rng.integers(0, 30, n).astype(str), rng.integers(0, 20, n).astype(str), ["product"] * n,
                          rng.choice(["view", "cart", "fav", "buy"], n), rng.uniform(0, 100, n))))
    got = funnel.funnel_examples(ev, 20, 80, STAGES)
    inside = ev[(ev["t"] >= 20) & (ev["t"] < 80)]
    buys = inside[inside["event_type"] == "buy"].groupby(["user_key", "item_key"])["t"].apply(list)
    for row in got.itertuples():
        later = [t for t in buys.get((row.user_key, row.item_key), []) if t >= row.t]
        assert bool(later) == bool(row.label)
        assert 20 <= row.t < 80
    assert 0 < got["label"].mean() < 1


def test_weighted_auc_matches_sklearn():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500)
    p = np.round(0.7 * rng.random(500) + 0.3 * y, 2)  # ties
    w = rng.integers(0, 4, 500).astype(float)
    auc, _, _ = _ArmScorer(y, p).metrics(w, y)
    assert auc == pytest.approx(roc_auc_score(y, p, sample_weight=w), abs=1e-9)


def _simulated(rng, n_users: int, per_user: int = 5) -> ScoredSet:
    """Two scorers of one outcome with a user effect shared by a user's examples; ``better`` separates more."""
    users = np.repeat(np.arange(n_users), per_user)
    effect = rng.normal(0, 1, n_users)[users]
    y = (rng.random(len(users)) < 1 / (1 + np.exp(-(effect - 1.5)))).astype(int)
    noise = rng.normal(0, 1, len(users))
    worse = 0.5 * effect + noise + rng.normal(0, 1, len(users))
    better = effect + noise
    return ScoredSet(users, y, {"better": better, "worse": worse})


def test_bootstrap_interval_covers_the_true_difference():
    rng = np.random.default_rng(7)
    population = _simulated(rng, 100_000, per_user=2)
    truth = {a: _ArmScorer(population.y, p).metrics(np.ones(len(population.y)), population.y)[0] for a, p in population.probs.items()}
    true_diff = truth["better"] - truth["worse"]
    assert true_diff > 0.02
    covered = 0
    trials = 40
    for trial in range(trials):
        got = bootstrap_arms([_simulated(rng, 300)], {"d": ("better", "worse")}, replicates=200, seed=trial)
        low, high = got["diff_ci"]["d"]["auc"]
        covered += low <= true_diff <= high
    assert covered / trials >= 0.85, f"95 % intervals covered the true difference {covered} of {trials} times"


def _log(seed: int = 0) -> pd.DataFrame:
    """A small funnel log over 2026-01-01 .. 2026-01-09: users view items, cart some, buy where
    user and item share a parity (a signal any representation of the pair may learn)."""
    rng = np.random.default_rng(seed)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()
    rows = []
    for day in range(9):
        for u in range(USERS):
            for i in rng.choice(ITEMS, 5, replace=False):
                t = start + day * DAY + rng.uniform(0, DAY / 2)
                rows.append((f"user-{u}", f"product-{i}", "product", "view", t))
                if rng.random() < 0.5:
                    rows.append((f"user-{u}", f"product-{i}", "product", "cart", t + 60))
                if rng.random() < (0.6 if u % 2 == i % 2 else 0.1):
                    rows.append((f"user-{u}", f"product-{i}", "product", "buy", t + 600))
    return _events(rows)


def _publish_hir(settings, partition: str, seed: int) -> dict:
    vectors = write_fake_upstream(settings.artifacts_dir, partition, {"user": USERS, "product": ITEMS}, 8, seed=seed)
    art = Artifacts(settings.artifacts_dir)
    with atomic_dir(art.folder("feature_tables", partition)) as out:
        write_feature_tables(art.embeddings(partition), art.tokens(partition), cutoff_of(partition), out)
    return vectors


def _funnel_partition(settings, feast, events, partition):
    cutoff = cutoff_of(partition).timestamp()
    bounds = {"cutoff": cutoff, "test_start": cutoff + DAY, "test_end": cutoff + 2 * DAY}

    def write(writer):
        with atomic_dir(Artifacts(settings.artifacts_dir).folder(funnel.FEATURE_ASSET, partition)) as out:
            writer(out)

    return funnel.evaluate_partition(events[events["t"] < bounds["test_end"]], bounds, STAGES, feast, write,
                                     settings.replace(threads=1))


def test_features_are_read_point_in_time_and_a_planted_future_row_is_not_used(settings):
    events = _log()
    p, planted = PARTITIONS[0], "2026-01-09"
    vectors = _publish_hir(settings, p, seed=1)
    feast = FeastStore.from_settings(settings)
    feast.apply()
    results, scores = _funnel_partition(settings, feast, events, p)
    assert results["status"] == "ok" and set(results["arms"]) == {"base", "hir", "control"}
    assert results["test_examples"] == len(scores) and scores["label"].sum() == results["test_positives"]
    # plant rows dated 2026-01-10, after every example of the partition: other hir vectors, 999 user events
    planted_vectors = _publish_hir(settings, planted, seed=2)
    art = Artifacts(settings.artifacts_dir)
    with atomic_dir(art.folder(funnel.FEATURE_ASSET, planted)) as out:
        for view in funnel.VIEWS:
            frame = pd.read_parquet(art.folder(funnel.FEATURE_ASSET, p) / f"{view}.parquet")
            frame["cutoff"] = pd.Timestamp(cutoff_of(planted)).as_unit("us")
            if view == "funnel_user":
                frame["stage0_events"] = 999.0
            frame.to_parquet(out / f"{view}.parquet")
    refs = funnel.feature_refs("product", funnel.feast_views(settings.artifacts_dir, "product"))
    test = scores[["user_key", "item_key", "t"]].assign(item_type="product")
    got = funnel.read_features(feast, test, "product", refs)
    assert (got["funnel_user__stage0_events"] < 999).all(), "a row dated after the example was used"
    row = got.index[got["user_key"] == "user-0"][0]
    np.testing.assert_allclose(got.loc[row, "user_features__hir_embedding"], vectors["user"][0], rtol=1e-6)
    later = funnel.read_features(feast, test.assign(t=cutoff_of(planted).timestamp() + 60), "product", refs)
    assert (later["funnel_user__stage0_events"] == 999).all(), "the planted row is there for later moments"
    np.testing.assert_allclose(later.loc[row, "user_features__hir_embedding"], planted_vectors["user"][0], rtol=1e-6)


def test_funnel_rolls_over_partitions_through_the_ranker_asset(settings):
    """ranker_eval on three partitions (upstream faked), then the command's summary over them."""
    from hir.assets.evaluation import ranker_eval
    from hir.assets.serving import feast_registry, feature_tables
    from hir.cli.funnel import summarise_partitions
    from hir.graph.warehouse import connect
    from hir.resources import build_resources

    events = _log(seed=1)
    keys = sorted(set(events["user_key"]) | set(events["item_key"]))
    ids = {k: n for n, k in enumerate(keys)}
    with connect(settings.warehouse_path) as con:
        con.executemany("INSERT INTO entities (entity_id, entity_type, source_key) VALUES (?, ?, ?)",
                        [(n, k.split("-")[0], k) for k, n in ids.items()])
        con.executemany("INSERT INTO events (src, dst, event_type, ts, value) VALUES (?, ?, ?, ?, 1.0)",
                        [(ids[r.user_key], ids[r.item_key], r.event_type, datetime.fromtimestamp(r.t, timezone.utc))
                         for r in events.itertuples()])
    for n, partition in enumerate(PARTITIONS):
        write_fake_upstream(settings.artifacts_dir, partition, {"user": USERS, "product": ITEMS}, 8, seed=n)
        result = dg.materialize([feature_tables, feast_registry, ranker_eval], partition_key=partition,
                                resources=build_resources(settings.replace(threads=1)))
        assert result.success
        metadata = result.asset_materializations_for_node("ranker_eval")[0].metadata
        assert "funnel_lift_per_slice" in metadata and "hir − base" in metadata["funnel"].value
    report = summarise_partitions(Artifacts(settings.artifacts_dir), list(PARTITIONS), seed=0)
    assert report["sets"] == 3 and [p["partition"] for p in report["partitions"]] == list(PARTITIONS)
    for arm in ("base", "hir", "control"):
        assert 0.5 < report["arms"][arm]["auc"] <= 1 and report["arms"][arm]["ne"] > 0
    low, high = report["diff_ci"]["hir_minus_base"]["auc"]
    assert low <= report["diff"]["hir_minus_base"]["auc"] <= high
    assert set(report["slices"]) == set(funnel.SLICES)
    assert datetime.fromisoformat(report["partitions"][0]["partition"]) + timedelta(days=1) == datetime.fromisoformat(PARTITIONS[1])
