"""Bootstrap intervals over users for binary rankers (DESIGN §10).

A replicate draws the ``U`` users of a test set with replacement; an example weighs ``c_u``, the
number of times its user was drawn, so a user's examples stay together (they are not independent).
Every arm is scored on the same replicate, so differences between arms are paired.

Weighted metrics of probabilities ``p`` for labels ``y`` with weights ``w``:

* AUC ``= Σ_{i: y=1} w_i (W⁻(p < p_i) + ½ W⁻(p = p_i)) / (W⁺ W⁻)`` — the Mann-Whitney statistic,
  with ``W⁻(·)`` the weight of negatives in a score range and ``W⁺``, ``W⁻`` the totals;
* log-loss ``L = Σ w_i ℓ_i / Σ w_i`` with ``ℓ_i = -(y_i log p_i + (1 - y_i) log(1 - p_i))``;
* normalised entropy ``NE = L / H(ȳ)``, ``ȳ`` the weighted positive rate, ``H`` the binary entropy.

Several test sets (partitions) combine into the mean of their metrics: each replicate resamples
every partition's users independently and averages, so the interval is that of the mean. Intervals
are the 2.5 and 97.5 percentiles of the replicates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPS = 1e-7
METRICS = ("auc", "logloss", "ne")


@dataclass
class ScoredSet:
    """One test set: ``users`` (codes ``0..U-1``), labels ``y`` and each arm's probabilities."""

    users: np.ndarray
    y: np.ndarray
    probs: dict[str, np.ndarray]

    def subset(self, mask: np.ndarray) -> "ScoredSet":
        """The examples at ``mask``, users re-coded densely."""
        _, users = np.unique(self.users[mask], return_inverse=True)
        return ScoredSet(users, self.y[mask], {a: p[mask] for a, p in self.probs.items()})

    def usable(self) -> bool:
        """Both classes present (AUC and NE are defined)."""
        return len(self.y) > 0 and 0 < self.y.sum() < len(self.y)


class _ArmScorer:
    """Weighted AUC and log-loss of one arm, its ranks and losses computed once."""

    def __init__(self, y: np.ndarray, p: np.ndarray):
        p = np.clip(p, EPS, 1 - EPS)
        self.order = np.argsort(p, kind="mergesort")
        sorted_p = p[self.order]
        self.group = np.concatenate([[0], np.cumsum(sorted_p[1:] != sorted_p[:-1])])
        self.y_sorted = y[self.order].astype(np.float64)
        self.loss = -(y * np.log(p) + (1 - y) * np.log(1 - p))

    def metrics(self, w: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
        ws = w[self.order]
        pos = np.bincount(self.group, weights=ws * self.y_sorted)
        neg = np.bincount(self.group, weights=ws * (1 - self.y_sorted))
        below = np.cumsum(neg) - neg
        auc = float((pos * (below + 0.5 * neg)).sum() / max(pos.sum() * neg.sum(), EPS))
        logloss = float((w * self.loss).sum() / w.sum())
        rate = float(np.clip((w * y).sum() / w.sum(), EPS, 1 - EPS))
        entropy = -(rate * np.log(rate) + (1 - rate) * np.log(1 - rate))
        return auc, logloss, logloss / entropy


def _replicates(sets: list[ScoredSet], replicates: int, seed: int) -> tuple[dict, dict]:
    """Point metrics (weights 1) and ``[replicates]`` arrays per arm and metric, means over ``sets``."""
    arms = list(sets[0].probs)
    scorers = [{a: _ArmScorer(s.y, s.probs[a]) for a in arms} for s in sets]
    point = {a: np.mean([sc[a].metrics(np.ones(len(s.y)), s.y) for s, sc in zip(sets, scorers)], axis=0) for a in arms}
    draws = {a: np.zeros((replicates, 3)) for a in arms}
    rng = np.random.default_rng(seed)
    for b in range(replicates):
        for s, sc in zip(sets, scorers):
            n_users = int(s.users.max()) + 1
            counts = np.bincount(rng.integers(0, n_users, n_users), minlength=n_users)
            w = counts[s.users].astype(np.float64)
            for a in arms:
                draws[a][b] += np.asarray(sc[a].metrics(w, s.y)) / len(sets)
    return point, draws


def _interval(values: np.ndarray) -> list[float]:
    finite = values[np.isfinite(values)]
    return [round(float(np.percentile(finite, 2.5)), 6), round(float(np.percentile(finite, 97.5)), 6)]


def bootstrap_arms(sets: list[ScoredSet], differences: dict[str, tuple[str, str]], replicates: int, seed: int) -> dict:
    """Metrics with intervals for every arm and paired differences, means over ``sets``.

    Args:
        sets: test sets with the same arms (e.g. one per partition); those lacking a class are left out.
        differences: ``{name: (arm, other)}``, e.g. ``{"hir_minus_base": ("hir", "base")}``.
        replicates: bootstrap replicates; seed: the draw's seed.
    Returns ``{"arms": {arm: {metric, metric_ci}}, "diff": {name: {metric}}, "diff_ci": {name: {metric: [low, high]}},
    "sets": n}``, or ``{"status": "not applicable", ...}`` when no set has both classes.
    """
    sets = [s for s in sets if s.usable()]
    if not sets:
        return {"status": "not applicable", "reason": "no test set holds both classes"}
    point, draws = _replicates(sets, replicates, seed)
    arms = {a: {m: round(float(point[a][k]), 6) for k, m in enumerate(METRICS)}
            | {f"{m}_ci": _interval(draws[a][:, k]) for k, m in enumerate(METRICS)} for a in point}
    diff = {name: {m: round(float(point[a][k] - point[o][k]), 6) for k, m in enumerate(METRICS)}
            for name, (a, o) in differences.items()}
    diff_ci = {name: {m: _interval(draws[a][:, k] - draws[o][:, k]) for k, m in enumerate(METRICS)}
               for name, (a, o) in differences.items()}
    return {"arms": arms, "diff": diff, "diff_ci": diff_ci, "sets": len(sets),
            "examples": int(sum(len(s.y) for s in sets)), "positives": int(sum(s.y.sum() for s in sets))}
