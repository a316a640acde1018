"""Held-out next engagements: how well a model, mid-training, predicts what users engage with next.

The trainer chooses among its training cycles on them (:class:`~hir.models.trainer.Trainer`,
``TrainConfig.cycles``; :func:`kept_cycle`). The held-out examples are the newest first contact (an engagement with an
item the user had no edge with before, :func:`first_contacts`) of each of the ``n`` users whose
newest first contacts are the newest of the snapshot; training keeps none of those users' examples
from then on. First contacts, because what comes next for a user is mostly new to it (on the
synthetic default 84 % of the next day's purchases), while its newest engagement is mostly a funnel
step on something it already saw (98 % there) — a criterion that rewards recalling a user's own
history picked more cycles than the next day's purchases wanted. With ``t₀`` the earliest of their
times, the candidates are embedded from views strictly before ``t₀`` — no candidate's view holds a
held-out engagement — and each held-out user ``u`` from its views strictly before its own time
``t_u``; the candidates are scored as the training task scores them,

``z_ui = ⟨ĥ_u, ĥ_i⟩ / T + π_i(t_u)``

(cosine over the temperature plus the causal log prior, :class:`~hir.models.prior.CausalPopularity`),
and the figure is Recall@k: the share of held-out users whose engaged item ranks among their top
``k`` (ties counted against it).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from hir.models.examples import CausalExamples
from hir.models.graph import TemporalGraph
from hir.models.model import HIRModel, WorldKnowledge
from hir.models.prior import CausalPopularity
from hir.models.sampler import SamplerConfig, ViewSampler


def first_contacts(graph: TemporalGraph, examples: CausalExamples) -> torch.Tensor:
    """bool ``[X]``: no edge of any type from the example's anchor to its positive is in its views
    (none ends before its time) — the engagement is with something new to the anchor, not a later
    funnel step on something it saw."""
    csr = graph.csr
    n = graph.num_nodes
    keys, inverse = torch.unique(csr.rows() * n + csr.indices, return_inverse=True)
    first = torch.full((keys.numel(),), float("inf"), dtype=torch.float64).scatter_reduce(0, inverse, csr.last_ts, "amin")
    at = torch.searchsorted(keys, examples.anchor * n + examples.positive).clamp_max(keys.numel() - 1)
    return first[at] >= examples.time  # an example's own edge ends at its time: never before it


def hold_out(examples: CausalExamples, users: int, eligible: torch.Tensor | None = None) -> tuple[CausalExamples, CausalExamples]:
    """``(training, held_out)``: the newest eligible example of each of the ``users`` anchors whose
    newest eligible examples are newest; training keeps every other anchor's examples and the held
    anchors' earlier ones (nothing of a held anchor at or after its held-out time), both in time order.

    Args:
        examples: causal examples in time order (:func:`~hir.models.examples.training_examples`).
        users: how many anchors to hold out (0: none; at most all but one, so training keeps some).
        eligible: bool ``[X]``, the examples that may be held out (:func:`first_contacts`); all by default.
    """
    anchors, inverse = torch.unique(examples.anchor, return_inverse=True)
    rows = torch.arange(len(examples))
    candidates = rows if eligible is None else rows[eligible]
    newest = torch.full((anchors.numel(),), -1, dtype=torch.long).scatter_reduce(0, inverse[candidates], candidates, "amax")
    count = min(users, anchors.numel() - 1, int((newest >= 0).sum()))
    held = newest[torch.argsort(newest, descending=True)[:max(0, count)]].sort().values  # later rows, later times
    since = torch.full((anchors.numel(),), float("inf"), dtype=torch.float64)
    since[inverse[held]] = examples.time[held]
    keep = examples.time < since[inverse]
    return examples.take(torch.nonzero(keep).flatten()), examples.take(held)


def no_worse(recalls: list[float], held_out: int) -> bool:
    """Whether the last of ``recalls`` is within one standard error of the best of them,
    ``r ≥ r* − √(r*(1 − r*)/n)`` over ``n = held_out`` examples: a cycle that scores that close to
    the best is as good as far as ``n`` held-out examples can tell, and it has trained longer.

    A strict "better than the best" let the noise of a few thousand examples decide: on Amazon
    Beauty, at training seed 1, a second cycle 0.002 below the first (one standard error is 0.006
    there) was discarded, and the one-pass encoder left scored 0.0644 Recall@10 on the test; with
    the second cycle kept it scores 0.0783 (README, "Variance, averaging").
    """
    best = max(recalls)
    return recalls[-1] >= best - math.sqrt(best * (1.0 - best) / max(1, held_out))


def kept_cycle(recalls: list[float], held_out: int) -> int:
    """The 1-based cycle whose weights training keeps (0 without ``recalls``): the last one that was
    :func:`no_worse` than the cycles before it, training having stopped at the first that was not."""
    kept = 0
    for k in range(1, len(recalls) + 1):
        if not no_worse(recalls[:k], held_out):
            break
        kept = k
    return kept


@dataclass
class HeldOutNext:
    """Scores a model on held-out next engagements (module doc).

    Args:
        graph: the training snapshot.
        held_out: the held-out examples (:func:`hold_out`).
        candidates: int64 ``[C]`` the nodes a positive is ranked among (every held-out positive is one).
        prior: the causal log prior of the training examples (what the training task adds).
        sampler_config: the training views' configuration (used without edge dropout).
        temperature: ``T``, the training task's.
        wk: per-node world knowledge (:class:`~hir.models.model.WorldKnowledge`) or ``None``.
        k: the recall's cut-off.
        batch_size: anchors per forward pass.
        seed: seed of the views, the same at every call so that two models see the same views.
    """

    graph: TemporalGraph
    held_out: CausalExamples
    candidates: torch.Tensor
    prior: CausalPopularity
    sampler_config: SamplerConfig
    temperature: float
    wk: WorldKnowledge | None = None
    k: int = 10
    batch_size: int = 512
    seed: int = 0

    def _embed(self, model: HIRModel, sampler: ViewSampler, nodes: torch.Tensor, times: torch.Tensor,
               backend: str, device: torch.device) -> torch.Tensor:
        knowledge = self.wk
        gen = torch.Generator().manual_seed(self.seed)
        out = []
        for start in range(0, nodes.numel(), self.batch_size):
            view = sampler.narrow(nodes[start:start + self.batch_size], gen, times=times[start:start + self.batch_size]).to(device)
            out.append(model.embed(view, knowledge.per_token(view) if knowledge else None, backend)[0].float().cpu())
        return F.normalize(torch.cat(out), dim=1)

    def embeddings(self, model: HIRModel, backend: str = "dense", device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """``(users [H, dim], candidates [C, dim])``: unit-norm embeddings of the held-out users, each
        as of its example's time, and of the candidates as of the earliest of those times."""
        device = torch.device(device)
        sampler = ViewSampler(self.graph, dataclasses.replace(self.sampler_config, edge_dropout=0.0, broad_edge_dropout=0.0))
        held = self.held_out
        since = torch.full(self.candidates.shape, float(held.time.min()), dtype=torch.float64)
        was_training = model.training
        model.eval()
        with torch.no_grad():
            users = self._embed(model, sampler, held.anchor, held.time, backend, device)
            items = self._embed(model, sampler, self.candidates, since, backend, device)
        model.train(was_training)
        return users, items

    def recall(self, model: HIRModel, backend: str = "dense", device: str | torch.device = "cpu") -> float:
        """Recall@k of ``model`` on the held-out examples (module doc)."""
        users, items = self.embeddings(model, backend, device)
        held = self.held_out
        column = torch.full((self.graph.num_nodes,), -1, dtype=torch.long)
        column[self.candidates] = torch.arange(self.candidates.numel())
        hits = 0
        for start in range(0, users.shape[0], self.batch_size):
            rows = slice(start, start + self.batch_size)
            scores = users[rows] @ items.T / self.temperature
            scores += self.prior.log_prior(self.candidates[None], held.time[rows, None])
            positive = scores.gather(1, column[held.positive[rows], None])
            hits += int(((scores >= positive).sum(1) <= self.k).sum())  # the positive itself counts once
        return hits / max(1, len(held))
