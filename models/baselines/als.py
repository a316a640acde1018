"""Matrix factorisation by implicit-feedback ALS (``implicit``)."""

from __future__ import annotations

import numpy as np
import torch
from hir.models.baselines.base import Scorer


class ALSScorer(Scorer):
    """Matrix factorisation by implicit-feedback ALS (``implicit.als``, CPU): ``s_ui = <x_u, y_i>``.

    Args:
        factors: latent dimension; regularization: L2 weight; alpha: confidence ``1 + alpha * r``;
        iterations: ALS sweeps; seed: random state; threads: implicit's worker threads.
    """

    name = "als"

    def __init__(self, factors: int = 64, regularization: float = 0.05, alpha: float = 10.0,
                 iterations: int = 15, seed: int = 0, threads: int = 1):
        self.params = dict(factors=factors, regularization=regularization, alpha=alpha,
                           iterations=iterations, random_state=seed, num_threads=threads)
        self.user_factors = torch.zeros(0)
        self.item_factors = torch.zeros(0)

    def fit(self, train, validation=None):
        from implicit.cpu.als import AlternatingLeastSquares
        from threadpoolctl import threadpool_limits

        with threadpool_limits(1, "blas"):
            model = AlternatingLeastSquares(**self.params)
            model.fit(train.matrix(binary=True), show_progress=False)
        self.user_factors = torch.as_tensor(np.asarray(model.user_factors), dtype=torch.float32)
        self.item_factors = torch.as_tensor(np.asarray(model.item_factors), dtype=torch.float32)
        return self

    def score(self, users, history):
        return self.user_factors[torch.as_tensor(users)] @ self.item_factors.T
