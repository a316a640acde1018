"""SASRec trained with full cross-entropy over all items, optionally started from given item vectors."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from hir.models.baselines.base import Interactions, Scorer, last_items
from hir.models.baselines.neural import EarlyStopping, TrainConfig
from torch import nn


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
