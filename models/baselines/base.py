"""What every retrieval scorer shares, on interactions given as plain arrays.

Users and items are dense indices ``0 .. n_users-1`` and ``0 .. n_items-1``. A :class:`Scorer` is
fitted on training :class:`Interactions` (optionally watching :class:`Queries` for early stopping),
then scores users against every item given the *history* it may condition on (for the published
leave-last-out protocol the test history holds one more item than the training part);
:func:`evaluate` ranks all items for every query. :class:`RandomScorer` is the floor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from hir.models.metrics import per_query_metrics, query_means


@dataclass
class Interactions:
    """User-item interactions as parallel arrays.

    Attributes:
        users, items: int64 ``[N]`` dense indices.
        times: float64 ``[N]``: unix seconds, or the position in the user's sequence when there are
            no timestamps; events of a user sort chronologically by ``(times, input order)``.
        n_users, n_items: index space sizes (not every index needs an interaction).
    """

    users: np.ndarray
    items: np.ndarray
    times: np.ndarray
    n_users: int
    n_items: int

    def __post_init__(self) -> None:
        self.users = np.asarray(self.users, dtype=np.int64)
        self.items = np.asarray(self.items, dtype=np.int64)
        self.times = np.asarray(self.times, dtype=np.float64)
        self._sequences: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.users)

    def sequences(self) -> tuple[np.ndarray, np.ndarray]:
        """Chronological item sequences as a CSR ``(indptr [n_users+1], items)`` (computed once)."""
        if self._sequences is None:
            order = np.lexsort((np.arange(len(self.users)), self.times, self.users))
            counts = np.bincount(self.users, minlength=self.n_users)
            self._sequences = (np.concatenate([[0], np.cumsum(counts)]), self.items[order])
        return self._sequences

    def matrix(self, binary: bool = True) -> sp.csr_matrix:
        """``[n_users, n_items]`` CSR of interaction counts (or 1 where any, if ``binary``)."""
        data = np.ones(len(self.users), dtype=np.float32)
        mat = sp.csr_matrix((data, (self.users, self.items)), shape=(self.n_users, self.n_items))
        mat.sum_duplicates()
        if binary:
            mat.data[:] = 1.0
        return mat


@dataclass
class Queries:
    """Evaluation queries: users, their target items, the history to condition on, items to mask.

    Attributes:
        users: int64 ``[Q]`` user index per query.
        targets: int64 ``[Q, T]`` target items padded with ``-1``.
        history: interactions a scorer may use to score these queries.
        exclude_indptr, exclude_indices: CSR (one row per query) of items removed from the
            candidates, or ``None`` for no masking.
    """

    users: np.ndarray
    targets: torch.Tensor
    history: Interactions
    exclude_indptr: np.ndarray | None = None
    exclude_indices: np.ndarray | None = None

    def subset(self, rows: np.ndarray) -> "Queries":
        """The queries at ``rows``, in that order."""
        indptr = indices = None
        if self.exclude_indptr is not None:
            starts, ends = self.exclude_indptr[rows], self.exclude_indptr[rows + 1]
            indptr = np.concatenate([[0], np.cumsum(ends - starts)])
            indices = np.concatenate([self.exclude_indices[s:e] for s, e in zip(starts, ends)] + [np.empty(0, np.int64)])
        return Queries(self.users[rows], self.targets[torch.as_tensor(rows)], self.history, indptr, indices)


def evaluate(scorer: "Scorer", queries: Queries, ks=(10,), batch_size: int = 1024) -> dict[str, float]:
    """Mean Recall@K / NDCG@K / MRR of ``scorer`` on ``queries`` (full ranking, see :mod:`hir.models.metrics`)."""
    return query_means(evaluate_per_query(scorer, queries, ks, batch_size))


def evaluate_per_query(scorer: "Scorer", queries: Queries, ks=(10,), batch_size: int = 1024) -> dict[str, np.ndarray]:
    """Every query's Recall@K / NDCG@K / MRR of ``scorer`` on ``queries`` (``[Q]`` arrays, :func:`evaluate`'s means)."""
    return per_query_metrics(
        lambda rows: scorer.score(queries.users[rows], queries.history),
        queries.targets,
        queries.history.n_items,
        queries.exclude_indptr,
        queries.exclude_indices,
        ks,
        batch_size,
    )


def last_items(history: Interactions, users: np.ndarray, length: int) -> np.ndarray:
    """``[len(users), length]`` each user's last ``length`` items, most recent last, left-padded with ``-1``."""
    indptr, items = history.sequences()
    users = np.asarray(users, dtype=np.int64)
    starts, ends = indptr[users], indptr[users + 1]
    out = np.full((len(users), length), -1, dtype=np.int64)
    for back in range(1, length + 1):
        present = ends - back >= starts
        out[present, length - back] = items[ends[present] - back]
    return out


class Scorer:
    """Fit on training interactions, then score users against every item.

    Subclasses set ``name`` and implement :meth:`score`; :meth:`fit` returns ``self``.
    """

    name = "scorer"

    def fit(self, train: Interactions, validation: Queries | None = None) -> "Scorer":
        """Learn from ``train``; ``validation`` (if given) may drive early stopping."""
        return self

    def score(self, users: np.ndarray, history: Interactions) -> torch.Tensor:
        """``[len(users), n_items]`` float32 scores, higher is better, given each user's ``history``."""
        raise TypeError(f"{type(self).__name__} does not implement score()")


class RandomScorer(Scorer):
    """Uniform random scores (a floor every baseline must beat); ``seed`` fixes the draw."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.generator = torch.Generator().manual_seed(seed)

    def score(self, users, history):
        return torch.rand((len(users), history.n_items), generator=self.generator)
