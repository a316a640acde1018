"""Item-to-item co-occurrence kNN over consecutive pairs."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from hir.models.baselines.base import Scorer, last_items
from hir.models.baselines.popularity import PopularityScorer


class CooccurrenceScorer(Scorer):
    """Item-to-item kNN over consecutive pairs, weighted by the recency of the user's last items.

    ``C[a, b]`` counts training pairs where ``b`` directly follows ``a`` in a user's sequence (and,
    if ``symmetric``, ``a`` follows ``b``). A user whose last items are ``h_1`` (most recent),
    ``h_2``, ... scores ``s_i = sum_j w_j C[h_j, i]``.

    Items the user's recent items never preceded tie at 0; ``backoff`` adds
    ``backoff * popularity_i / max popularity`` so such ties fall back to training popularity
    (``backoff`` is far below one co-occurrence count, so it never reorders co-occurring items).

    Args:
        weights: ``w_1, w_2, ...`` for the most recent items first (default 1, 0.5, 0.25).
        symmetric: count pairs in both directions.
        backoff: weight of the popularity tie-breaker (0 disables it).
    """

    name = "cooccurrence"

    def __init__(self, weights=(1.0, 0.5, 0.25), symmetric: bool = False, backoff: float = 1e-3):
        self.weights = np.asarray(weights, dtype=np.float32)
        self.symmetric, self.backoff = symmetric, backoff
        self.pairs = sp.csr_matrix((0, 0))
        self.prior = torch.zeros(0)

    def fit(self, train, validation=None):
        indptr, items = train.sequences()
        owner = np.repeat(np.arange(train.n_users), np.diff(indptr))
        same_user = owner[:-1] == owner[1:]
        first, second = items[:-1][same_user], items[1:][same_user]
        if self.symmetric:
            first, second = np.concatenate([first, second]), np.concatenate([second, first])
        data = np.ones(len(first), dtype=np.float32)
        self.pairs = sp.csr_matrix((data, (first, second)), shape=(train.n_items, train.n_items))
        self.pairs.sum_duplicates()
        popularity = PopularityScorer().fit(train).item_scores
        self.prior = self.backoff * popularity / popularity.max().clamp(min=1.0)
        return self

    def score(self, users, history):
        recent = last_items(history, users, len(self.weights))[:, ::-1]
        rows, cols = np.nonzero(recent >= 0)
        query = sp.csr_matrix(
            (self.weights[cols], (rows, recent[rows, cols])), shape=(len(users), history.n_items)
        )
        return torch.as_tensor((query @ self.pairs).toarray(), dtype=torch.float32) + self.prior
