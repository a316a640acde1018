"""Time-decayed popularity."""

from __future__ import annotations

import numpy as np
import torch
from hir.models.baselines.base import Scorer


class PopularityScorer(Scorer):
    """Time-decayed popularity: ``s_i = sum_{events e on i} 2^(-(t_max - t_e) / half_life)``.

    Args:
        half_life: in the unit of ``Interactions.times``; ``None`` counts events without decay.
    """

    name = "popularity"

    def __init__(self, half_life: float | None = None):
        self.half_life = half_life
        self.item_scores = torch.zeros(0)

    def fit(self, train, validation=None):
        weights = np.ones(len(train), dtype=np.float64)
        if self.half_life is not None and len(train):
            weights = np.exp2(-(train.times.max() - train.times) / self.half_life)
        self.item_scores = torch.as_tensor(np.bincount(train.items, weights, minlength=train.n_items), dtype=torch.float32)
        return self

    def score(self, users, history):
        return self.item_scores.expand(len(users), -1).clone()
