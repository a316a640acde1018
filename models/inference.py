"""Inference with a trained :class:`~hir.models.model.HIRModel` (DESIGN §7): every node embedded
from its neighbourhood as of the snapshot's cut-off (new entities included), and the check that the
compiled ``flex`` attention agrees with ``dense`` on this machine.

The views are sampled as training sampled them, at an explicit time — the cut-off ``T``: entries
before ``T``, edge ages ``T − last_ts`` and node metadata recomputed as of ``T``
(:func:`~hir.models.graph.node_features_at`) — so a representation at serving time is the one the
training examples learnt at their own times. Fresh serving embeds a later snapshot (one that holds
the events up to the serving time) with the same model; nothing is retrained.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

import torch
from hir.models.graph import TemporalGraph
from hir.models.losses import standardize
from hir.models.model import HIRModel, WorldKnowledge
from hir.models.sampler import SamplerConfig, ViewSampler


@dataclass
class Embeddings:
    """Inference output: ``embedding`` ``[N, dim]`` float32, ``coarse``/``fine`` ``[N]`` int64."""

    embedding: torch.Tensor
    coarse: torch.Tensor
    fine: torch.Tensor


def embed_all(
    graph: TemporalGraph,
    model: HIRModel,
    sampler_config: SamplerConfig,
    wk: torch.Tensor | None = None,
    batch_size: int = 256,
    backend: str = "flex",
    device: str | torch.device = "cpu",
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    standardize_scores: bool = True,
    view: str = "narrow",
) -> Embeddings:
    """Embed every node from one view (without edge dropout), with nested coarse and fine prototypes.

    Args:
        graph: the snapshot whose nodes are embedded (cold-start nodes included: their hashed ids
            and features still give a representation).
        model: a trained model (usually :func:`~hir.models.checkpoint.load_model`'s student).
        sampler_config: the views' configuration (the training run's).
        wk: per-node world knowledge ``[N, d]`` or ``None``.
        batch_size: anchors per forward pass.
        backend: attention backend (``flex`` everywhere for inference).
        device: torch device.
        seed: seed of the view sampler, so inference is reproducible.
        progress: called with ``(done, total)`` after each batch.
        standardize_scores: z-score the prototype scores per prototype over all nodes before the
            nested argmax, as the training targets were (see :func:`~hir.models.losses.standardize`).
        view: ``narrow`` (default: the views the student was trained on) or ``broad``.
    """
    sampler = ViewSampler(graph, dataclasses.replace(sampler_config, edge_dropout=0.0, broad_edge_dropout=0.0))
    sample = sampler.narrow if view == "narrow" else sampler.broad
    knowledge = WorldKnowledge.of(wk)
    gen = torch.Generator().manual_seed(seed)
    n = graph.num_nodes
    out_h, out_c, out_f = [], [], []
    model = model.to(device).eval()
    with torch.no_grad():
        for start in range(0, n, batch_size):
            anchors = torch.arange(start, min(n, start + batch_size))
            view = sample(anchors, gen, times=_at_cutoff(graph, anchors)).to(device)
            h, coarse, fine = model.embed(view, knowledge.per_token(view) if knowledge else None, backend)
            out_h.append(h.float().cpu())
            out_c.append(coarse.float().cpu())
            out_f.append(fine.float().cpu())
            if progress:
                progress(int(anchors[-1]) + 1, n)
        coarse, fine = torch.cat(out_c), torch.cat(out_f)
        if standardize_scores:
            coarse, fine = standardize(coarse), standardize(fine)
        coarse_id, fine_id = model.prototypes.assign_scores(coarse.to(device), fine.to(device))
    return Embeddings(torch.cat(out_h), coarse_id.cpu(), fine_id.cpu())


def _at_cutoff(graph: TemporalGraph, anchors: torch.Tensor) -> torch.Tensor:
    """``[B]`` float64 times, all the snapshot's cut-off (views and metadata as of ``T``)."""
    return torch.full(anchors.shape, graph.cutoff, dtype=torch.float64)


def flex_self_check(
    graph: TemporalGraph,
    model: HIRModel,
    sampler_config: SamplerConfig,
    wk: torch.Tensor | None = None,
    batch_size: int = 256,
    device: str | torch.device = "cpu",
    repeats: int = 3,
    seed: int = 0,
) -> float:
    """The largest ``|h_flex − h_dense|`` over the batches :func:`embed_all` runs first and last.

    Both batches are sampled as inference samples them (padding included, the short last batch
    included), and flex runs ``repeats`` times on each, since a faulty compiled kernel can change
    its answer from call to call. Non-finite flex output counts as an infinite difference.
    """
    sampler = ViewSampler(graph, dataclasses.replace(sampler_config, edge_dropout=0.0, broad_edge_dropout=0.0))
    knowledge = WorldKnowledge.of(wk)
    n = graph.num_nodes
    starts = sorted({0, (max(n - 1, 0) // batch_size) * batch_size})
    worst = 0.0
    model = model.to(device).eval()
    with torch.no_grad():
        for start in starts:
            anchors = torch.arange(start, min(n, start + batch_size))
            view = sampler.narrow(anchors, torch.Generator().manual_seed(seed), times=_at_cutoff(graph, anchors)).to(device)
            per_token = knowledge.per_token(view) if knowledge else None
            dense = model.embed(view, per_token, "dense")[0]
            for _ in range(repeats):
                flex = model.embed(view, per_token, "flex")[0]
                diff = (flex - dense).abs().max().item() if torch.isfinite(flex).all() else math.inf
                worst = max(worst, diff)
    return worst
