"""Retrieval baselines behind one interface, on interactions given as plain arrays.

Users and items are dense indices ``0 .. n_users-1`` and ``0 .. n_items-1``. A :class:`Scorer` is
fitted on training :class:`Interactions` (optionally watching :class:`Queries` for early stopping),
then scores users against every item given the *history* it may condition on (for the published
leave-last-out protocol the test history holds one more item than the training part).

Baselines: time-decayed popularity, item co-occurrence kNN over consecutive pairs, matrix
factorisation (``implicit`` ALS), LightGCN (torch_geometric, BPR loss), SASRec trained with full
cross-entropy over all items, text-only world knowledge (cosine to the mean of the user's item
vectors), and :class:`EmbeddingScorer` (dot product of given user and item vectors), through which
any learned embeddings become one more scorer; :class:`PriorCorrectedScorer` scores contrastive
embeddings (hir's) for retrieval by adding the item's log prior to the tempered cosine.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch
from hir.models.metrics import evaluate_queries
from torch import nn


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
    return evaluate_queries(
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


class EmbeddingScorer(Scorer):
    """``s_ui = <U_u, V_i>`` for given user and item vectors (e.g. hir's entity embeddings).

    Args:
        user_vectors: ``[n_users, d]``; item_vectors: ``[n_items, d]``.
    """

    name = "embedding"

    def __init__(self, user_vectors, item_vectors, name: str | None = None):
        self.user_vectors = torch.as_tensor(np.asarray(user_vectors), dtype=torch.float32)
        self.item_vectors = torch.as_tensor(np.asarray(item_vectors), dtype=torch.float32)
        self.name = name or self.name

    def score(self, users, history):
        return self.user_vectors[torch.as_tensor(users)] @ self.item_vectors.T


class PriorCorrectedScorer(Scorer):
    """Contrastive embeddings ranked for retrieval: ``s_ui = ⟨û_u, v̂_i⟩ / T + log(p_i + 1)``.

    An encoder trained with InfoNCE at temperature ``T`` on L2-normalised vectors ``û, v̂``, with
    negatives drawn in proportion to popularity, learns ``⟨û, v̂⟩ / T ≈ log p(i | u) / p(i) + c(u)``
    (pointwise mutual information), which is blind to how often an item is taken at all. Adding the
    log prior turns it back into ``log p(i | u) + c(u)``, the quantity future-interaction retrieval
    ranks by. ``p_i`` is the item's time-decayed interaction count in the training data
    (:class:`PopularityScorer`); the pseudo-count of one keeps unseen items' scores finite, so the
    embedding can still lift a cold item.

    With ``recent_weights`` ``w_1, w_2, ...`` the query is the user's last items instead of its
    snapshot embedding, ``û_u = normalise(Σ_j w_j v̂_{h_j})`` (``h_1`` the most recent, as the
    co-occurrence baseline weighs them): the embedding of a session that moved on after the cut-off.
    A user without history keeps its own embedding.

    Args:
        user_vectors: ``[n_users, d]``; item_vectors: ``[n_items, d]`` (normalised here).
        temperature: ``T`` of the encoder's InfoNCE.
        half_life: popularity decay in the unit of ``Interactions.times``; ``None`` counts events.
        name: the scorer's name in reports.
        recent_weights: weights of the user's most recent items, or ``None`` for the user's embedding.
    """

    name = "prior_corrected"

    def __init__(self, user_vectors, item_vectors, temperature: float, half_life: float | None = None,
                 name: str | None = None, recent_weights=None):
        self.user_vectors = nn.functional.normalize(torch.as_tensor(np.asarray(user_vectors), dtype=torch.float32), dim=1)
        self.item_vectors = nn.functional.normalize(torch.as_tensor(np.asarray(item_vectors), dtype=torch.float32), dim=1)
        self.temperature, self.half_life = temperature, half_life
        self.name = name or self.name
        self.recent_weights = None if recent_weights is None else torch.as_tensor(recent_weights, dtype=torch.float32)
        self.log_prior = torch.zeros(len(self.item_vectors))

    def fit(self, train, validation=None):
        popularity = PopularityScorer(self.half_life).fit(train).item_scores
        self.log_prior = torch.log1p(popularity)
        return self

    def query(self, users, history) -> torch.Tensor:
        """``[len(users), d]`` unit query vectors: the users' embeddings or their recent items'."""
        own = self.user_vectors[torch.as_tensor(users)]
        if self.recent_weights is None:
            return own
        recent = torch.as_tensor(last_items(history, users, len(self.recent_weights))[:, ::-1].copy())
        present = recent >= 0
        pooled = (self.item_vectors[recent.clamp_min(0)] * (self.recent_weights * present)[..., None]).sum(dim=1)
        return torch.where(present.any(dim=1, keepdim=True), nn.functional.normalize(pooled, dim=1), own)

    def score(self, users, history):
        return self.query(users, history) @ self.item_vectors.T / self.temperature + self.log_prior


class EngagementRerankScorer(Scorer):
    """A retrieval scorer's top ``K`` candidates re-ranked by an engagement head.

    The two stages of serving: ``retrieve`` proposes each user's ``K`` best items, and the head
    orders them by ``logit(u, i, r, Δ = 0)``, the probability it gives that the user engages with
    the item as ``edge_type`` now. Every other item keeps the retrieval order, below the candidates,
    so the result is still a full ranking.

    Args:
        retrieve: the first-stage scorer (fitted through this one).
        user_vectors: ``[n_users, d]``; item_vectors: ``[n_items, d]``: the representations the
            head was trained on.
        head: a module ``(u [B, 1, d], v [B, K, d], types [B, 1], ages [B, 1]) → logits [B, K]``
            (:class:`~hir.models.engagement.EngagementHead`).
        edge_type: the engagement type scored (the target event's type id).
        candidates: ``K``.
        name: the scorer's name in reports.
    """

    name = "engagement_rerank"

    def __init__(self, retrieve: Scorer, user_vectors, item_vectors, head: nn.Module, edge_type: int,
                 candidates: int = 200, name: str | None = None):
        self.retrieve, self.head = retrieve, head
        self.user_vectors = torch.as_tensor(np.asarray(user_vectors), dtype=torch.float32)
        self.item_vectors = torch.as_tensor(np.asarray(item_vectors), dtype=torch.float32)
        self.edge_type, self.candidates = edge_type, candidates
        self.name = name or self.name

    def fit(self, train, validation=None):
        self.retrieve.fit(train, validation)
        return self

    def score(self, users, history):
        base = self.retrieve.score(users, history)
        top = base.topk(min(self.candidates, base.shape[1]), dim=1).indices
        u = self.user_vectors[torch.as_tensor(users)].unsqueeze(1)
        type_and_age = torch.full((len(top), 1), self.edge_type), torch.zeros(len(top), 1)
        with torch.no_grad():
            logits = self.head(u, self.item_vectors[top], *type_and_age)
        # Candidates score >= 0, in the head's order; the rest <= -1, in the retrieval order.
        out = base - base.max(dim=1, keepdim=True).values - 1
        return out.scatter_(1, top, logits - logits.min(dim=1, keepdim=True).values)


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


@dataclass
class SASRecConfig:
    """SASRec (Kang & McAuley 2018) with full cross-entropy over all items (as in SASRec+/"CE" reproductions).

    Attributes:
        max_len: the last ``max_len`` items form the input; hidden: model width (FFN width too);
        layers, heads: transformer blocks and attention heads; dropout: on embeddings, attention
        and FFN; train: optimisation and early stopping.
    """

    max_len: int = 50
    hidden: int = 64
    layers: int = 2
    heads: int = 1
    dropout: float = 0.3
    train: TrainConfig = field(default_factory=lambda: TrainConfig(lr=5e-3, batch_size=128, max_epochs=30, patience=2, eval_users=2048))


class SASRecModule(nn.Module):
    """Causal self-attention over item sequences; item ``i`` is token ``i + 1`` (0 pads, left side).

    ``h = Blocks(sqrt(d) * E[x] + P[pos])``; the logits of the next item are ``h_t E[1:]^T``
    (input and output embeddings shared).
    """

    def __init__(self, n_items: int, config: SASRecConfig):
        super().__init__()
        self.config = config
        self.item = nn.Embedding(n_items + 1, config.hidden, padding_idx=0)
        self.position = nn.Embedding(config.max_len, config.hidden)
        self.dropout = nn.Dropout(config.dropout)
        block = nn.TransformerEncoderLayer(
            config.hidden, config.heads, dim_feedforward=config.hidden, dropout=config.dropout,
            batch_first=True, norm_first=True,
        )
        self.blocks = nn.TransformerEncoder(block, config.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(config.hidden)
        nn.init.normal_(self.item.weight, std=config.hidden ** -0.5)
        with torch.no_grad():
            self.item.weight[0].zero_()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[B, L]`` tokens → ``[B, L, hidden]`` states (padded positions are zero)."""
        length = tokens.shape[1]
        keep = (tokens > 0).unsqueeze(-1)
        positions = torch.arange(length, device=tokens.device) + self.config.max_len - length
        x = self.item(tokens) * math.sqrt(self.config.hidden) + self.position(positions)
        x = self.dropout(x) * keep
        causal = torch.triu(torch.ones(length, length, dtype=torch.bool, device=tokens.device), 1)
        blocked = causal.unsqueeze(0) | (tokens == 0).unsqueeze(1)
        bias = torch.zeros(blocked.shape, dtype=x.dtype, device=x.device).masked_fill(blocked, -1e9)
        bias = bias.repeat_interleave(self.config.heads, dim=0)
        return self.norm(self.blocks(x, mask=bias)) * keep

    def item_logits(self, states: torch.Tensor) -> torch.Tensor:
        return states @ self.item.weight[1:].T


class SASRecScorer(Scorer):
    """SASRec trained with full softmax cross-entropy: every position predicts the next item.

    Training input per user: its training sequence ``s``, positions ``s[:-1]`` predicting
    ``s[1:]`` (the last ``max_len`` of them); loss ``-log softmax(h_t E^T)[s_{t+1}]`` over all
    items. Scoring conditions on the last ``max_len`` items of the history.

    With ``item_init`` the shared item table ``E`` starts from given representations instead of
    ``N(0, 1/d)``: row ``i`` becomes ``x_i / ‖x_i‖`` (unit rows have the default's per-coordinate
    scale ``1/√d``); an all-zero row (an item without a representation) keeps its random start.
    Everything else — architecture, seed, epochs, early stopping — is the plain model's, so the
    two differ only in where the items start.

    Args:
        config: model and optimisation settings.
        item_init: ``[n_items, hidden]`` starting item vectors, or ``None``.
        name: the scorer's name in reports.
    """

    name = "sasrec"

    def __init__(self, config: SASRecConfig | None = None, item_init=None, name: str | None = None):
        self.config = config or SASRecConfig()
        self.item_init = None if item_init is None else torch.as_tensor(np.asarray(item_init), dtype=torch.float32)
        self.name = name or self.name
        self.model: SASRecModule | None = None
        self.epochs_run = 0

    def _start_items(self) -> None:
        rows = self.item_init
        if rows.shape != self.model.item.weight[1:].shape:
            raise ValueError(f"item_init is {tuple(rows.shape)}, the item table {tuple(self.model.item.weight[1:].shape)}")
        present = rows.norm(dim=1) > 0
        with torch.no_grad():
            self.model.item.weight[1:][present] = nn.functional.normalize(rows[present], dim=1)

    def _tokens(self, history: Interactions, users: np.ndarray, length: int) -> torch.Tensor:
        return torch.as_tensor(last_items(history, users, length) + 1)

    def fit(self, train, validation=None):
        cfg = self.config.train
        torch.manual_seed(cfg.seed)
        rng = np.random.default_rng(cfg.seed)
        self.model = SASRecModule(train.n_items, self.config)
        if self.item_init is not None:
            self._start_items()
        optimiser = torch.optim.Adam(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        counts = np.bincount(train.users, minlength=train.n_users)
        users = np.flatnonzero(counts >= 2)
        tokens = self._tokens(train, users, self.config.max_len + 1)
        stopper = EarlyStopping(self, validation, cfg)
        self.model.train()
        for epoch in range(cfg.max_epochs):
            for batch in torch.as_tensor(rng.permutation(len(users))).split(cfg.batch_size):
                seq = tokens[batch]
                seq = seq[:, (seq > 0).any(0)]
                inputs, labels = seq[:, :-1], seq[:, 1:]
                valid = (inputs > 0) & (labels > 0)
                states = self.model(inputs)[valid]
                loss = nn.functional.cross_entropy(self.model.item_logits(states), labels[valid] - 1)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
            self.epochs_run = epoch + 1
            if not stopper.step(self.model):
                break
        stopper.restore(self.model)
        return self

    def score(self, users, history):
        tokens = self._tokens(history, np.asarray(users), self.config.max_len)
        tokens = tokens[:, (tokens > 0).any(0)] if (tokens > 0).any() else tokens[:, -1:]
        with torch.no_grad():
            states = self.model(tokens)[:, -1]
            return self.model.item_logits(states)
