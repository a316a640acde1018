"""LightGCN (torch_geometric) trained with BPR."""

from __future__ import annotations

import numpy as np
import torch
from hir.models.baselines.base import Scorer
from hir.models.baselines.neural import EarlyStopping, TrainConfig


class LightGCNScorer(Scorer):
    """LightGCN (He et al. 2020, ``torch_geometric.nn.models.LightGCN``) trained with BPR.

    Users are nodes ``0..n_users-1`` and items ``n_users..``; each step samples training pairs
    ``(u, i)`` and a uniform negative item ``j`` and minimises
    ``-log sigmoid(<e_u, e_i> - <e_u, e_j>) + lambda ||e||^2``. ``s_ui = <e_u, e_i>`` after propagation.

    Args:
        dim: embedding size; layers: propagation layers; lambda_reg: L2 weight;
        config: optimisation and early stopping.
    """

    name = "lightgcn"

    def __init__(self, dim: int = 64, layers: int = 2, lambda_reg: float = 1e-4, config: TrainConfig | None = None):
        self.dim, self.layers, self.lambda_reg = dim, layers, lambda_reg
        self.config = config or self.default_config()
        self.embeddings = torch.zeros(0)
        self.n_users = 0
        self.epochs_run = 0

    @staticmethod
    def default_config() -> TrainConfig:
        return TrainConfig(lr=5e-3, batch_size=8192, max_epochs=20, patience=3)

    def fit(self, train, validation=None):
        from torch_geometric.nn.models import LightGCN

        torch.manual_seed(self.config.seed)
        rng = np.random.default_rng(self.config.seed)
        mat = train.matrix(binary=True).tocoo()
        users, items = torch.as_tensor(mat.row, dtype=torch.int64), torch.as_tensor(mat.col, dtype=torch.int64)
        self.n_users = train.n_users
        edge_index = torch.stack([torch.cat([users, items + self.n_users]), torch.cat([items + self.n_users, users])])
        model = LightGCN(train.n_users + train.n_items, self.dim, self.layers)
        optimiser = torch.optim.Adam(model.parameters(), lr=self.config.lr)
        stopper = EarlyStopping(self, validation, self.config)
        for _ in range(self.config.max_epochs):
            for batch in torch.as_tensor(rng.permutation(len(users))).split(self.config.batch_size):
                negatives = torch.as_tensor(rng.integers(0, train.n_items, len(batch))) + self.n_users
                u, i = users[batch], items[batch] + self.n_users
                emb = model.get_embedding(edge_index)
                pos, neg = (emb[u] * emb[i]).sum(1), (emb[u] * emb[negatives]).sum(1)
                loss = model.recommendation_loss(pos, neg, torch.cat([u, i, negatives]), lambda_reg=self.lambda_reg)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
            with torch.no_grad():
                self.embeddings = model.get_embedding(edge_index)
            self.epochs_run += 1
            if not stopper.step(model):
                break
        stopper.restore(model)
        with torch.no_grad():
            self.embeddings = model.get_embedding(edge_index)
        return self

    def score(self, users, history):
        return self.embeddings[torch.as_tensor(users)] @ self.embeddings[self.n_users :].T
