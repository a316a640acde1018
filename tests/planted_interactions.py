"""A small planted interaction data set for the scorer tests (models baselines, hir's scorers)."""

from __future__ import annotations

import numpy as np
from hir.models.baselines.base import Interactions, Queries, evaluate
from hir.models.metrics import pad_targets

CLUSTERS, PER_CLUSTER, USERS, LENGTH = 6, 20, 180, 9


def planted():
    """Users walk through their cluster's items in order (item k is followed by item k+1);
    clusters differ in size so popularity carries signal. Leave-one-out: the last item is the target."""
    rng = np.random.default_rng(0)
    cluster = rng.choice(CLUSTERS, USERS, p=[0.35, 0.25, 0.15, 0.1, 0.1, 0.05])
    start = rng.integers(0, PER_CLUSTER, USERS)
    seqs = [c * PER_CLUSTER + (s + np.arange(LENGTH)) % PER_CLUSTER for c, s in zip(cluster, start)]
    n_items = CLUSTERS * PER_CLUSTER

    def inter(cut):
        parts = [s[: LENGTH - cut] for s in seqs]
        return Interactions(np.repeat(np.arange(USERS), LENGTH - cut), np.concatenate(parts),
                            np.tile(np.arange(LENGTH - cut), USERS), USERS, n_items)

    def queries(back, history):
        indptr = np.arange(USERS + 1) * (LENGTH - 1 - back)
        indices = np.concatenate([s[: LENGTH - 1 - back] for s in seqs])
        return Queries(np.arange(USERS), pad_targets(np.array([s[-1 - back] for s in seqs])), history, indptr, indices)

    train, test_history = inter(2), inter(1)
    return train, queries(1, train), queries(0, test_history), cluster


def recall(scorer, data):
    train, validation, test, _ = data
    scorer.fit(train, validation)
    return evaluate(scorer, test, ks=(10,))["recall@10"]


def item_cluster_vectors(rng):
    items = np.repeat(np.arange(CLUSTERS), PER_CLUSTER)
    return np.eye(CLUSTERS)[items] + 0.05 * rng.standard_normal((len(items), CLUSTERS))
