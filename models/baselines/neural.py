"""What the neural baselines (LightGCN, SASRec) share: optimisation settings and early stopping
on validation NDCG@10."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from hir.models.baselines.base import Queries, Scorer, evaluate
from torch import nn


@dataclass
class TrainConfig:
    """Shared optimisation settings of the neural baselines.

    Attributes:
        lr: Adam learning rate; batch_size: examples per step; max_epochs: hard bound;
        patience: epochs without a better validation NDCG@10 before stopping;
        eval_users: validation queries used for early stopping (a fixed random subset; 0 = all);
        seed: seeds the initialisation and the sampling.
    """

    lr: float = 1e-3
    batch_size: int = 128
    max_epochs: int = 30
    patience: int = 3
    eval_users: int = 4096
    seed: int = 0
    weight_decay: float = 0.0


class EarlyStopping:
    """Keeps the best state dict by validation NDCG@10; ``step`` says whether to go on."""

    def __init__(self, scorer: "Scorer", validation: Queries | None, config: TrainConfig):
        self.scorer, self.config = scorer, config
        self.validation = validation
        if validation is not None and config.eval_users and len(validation.users) > config.eval_users:
            rng = np.random.default_rng(config.seed)
            rows = np.sort(rng.choice(len(validation.users), config.eval_users, replace=False))
            self.validation = validation.subset(rows)
        self.best, self.best_state, self.bad_epochs = -1.0, None, 0
        self.history: list[float] = []

    def step(self, module: nn.Module) -> bool:
        if self.validation is None:
            return True
        module.eval()
        with torch.no_grad():
            ndcg = evaluate(self.scorer, self.validation, ks=(10,))["ndcg@10"]
        module.train()
        self.history.append(ndcg)
        if ndcg > self.best:
            self.best, self.best_state, self.bad_epochs = ndcg, copy.deepcopy(module.state_dict()), 0
        else:
            self.bad_epochs += 1
        return self.bad_epochs < self.config.patience

    def restore(self, module: nn.Module) -> None:
        if self.best_state is not None:
            module.load_state_dict(self.best_state)
        module.eval()
