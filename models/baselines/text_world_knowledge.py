"""Text-only world knowledge: cosine between item text vectors and the user's profile."""

from __future__ import annotations

import numpy as np
import torch
from hir.models.baselines.base import Scorer
from torch import nn


class TextScorer(Scorer):
    """Text-only world knowledge: cosine between an item's text vector and the user's profile.

    The profile is the mean of the L2-normalised vectors of the items in the user's history
    (items without text have zero vectors); a user without history scores 0 everywhere.

    Args:
        item_vectors: ``[n_items, d]`` text embeddings (rows of zeros for items without text).
    """

    name = "text_world_knowledge"

    def __init__(self, item_vectors):
        vectors = torch.as_tensor(np.asarray(item_vectors), dtype=torch.float32)
        self.item_vectors = nn.functional.normalize(vectors, dim=1)

    def score(self, users, history):
        mat = history.matrix(binary=True)[np.asarray(users)]
        profile = torch.as_tensor((mat @ self.item_vectors.numpy()), dtype=torch.float32)
        return nn.functional.normalize(profile, dim=1) @ self.item_vectors.T
