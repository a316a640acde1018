"""Training of the HIR encoder (DESIGN §7) on causal examples: each user predicts what it engages
with next (a logQ-corrected sampled softmax), plus the seed's cross-view distillation onto two levels
of prototypes with Sinkhorn-Knopp targets and an engagement head.

One step, for a batch of ``B`` causal examples ``(u, t, v, r, w)`` per process
(:func:`~hir.models.examples.next_engagement_examples`: user ``u`` engaged with ``v`` of a target type
at ``t`` through event type ``r`` of funnel weight ``w``) and a shared pool of ``M`` candidates of the
target types (:class:`~hir.models.candidates.CandidateSampler`):

1. anchors = ``[u, v, pool]`` (``2B + M`` nodes) at times ``[t, t, t_(j mod B)]``: the ``M`` pool
   nodes are the softmax's shared candidates and, the first ``B`` of them, the engagement head's
   popularity-drawn negatives at their rows' times; every view holds only entries strictly before
   its anchor's time, with edge ages and node metadata as of then, so no example sees its own
   positive or anything later; a user's view starts from its newest entries
   (``SamplerConfig.broad_recent / narrow_recent``); with probability ``pair_dropout`` an example's
   user and positive also lose their own earlier edges to each other in the student views (the
   view of the item the user then buys), so the positive is predicted from the user's other
   engagements. A step costs ``2 + M/B`` student views per
   example, so a large batch with a pool of a few hundred gives ``B − 1 + M ≥ 1000`` negatives
   cheaply;
2. one broad view for the teacher per user and positive of the first ``teacher_batch`` examples
   (the prototype losses' rows: the teacher's long views cost most of a step, the next-engagement
   task needs none), ``narrow_views`` narrow views of every anchor for the student, the pool's
   included: its negatives carry gradient like the positives (with the pool held fixed, the
   positives alone pulled every item towards the users and the representations collapsed, cosines
   rising from 0.6 to 0.95 in ten steps while the loss stayed at the prior's);
3. teacher (the EMA of the student, no gradient): ``z_t = proj(enc(broad))``, cosine scores to
   the coarse (``K₁``) and fine (``K₂``) prototypes, Sinkhorn-Knopp → balanced targets ``q``;
4. student on each narrow view: ``h = enc(narrow)``, ``p = softmax(⟨z_s, c⟩/τ)`` at both levels;
   ``L_next`` = sampled softmax of ``u``'s positive among the ``B`` positives and the ``M`` pool
   nodes, ``⟨ĥ_u, ĥ_c⟩/T + π_c(t) − log Q(c)`` with ``π`` the log prior as of ``t``
   (:class:`~hir.models.prior.CausalPopularity`, what scoring adds) and ``Q`` the candidate's
   expected count (:func:`~hir.models.losses.sampled_softmax`), weighted by ``w``;
   ``L_proto = mean_views [CE(q_coarse, p_coarse) + CE(q_fine, p_fine)] / 2`` over users and positives;
   ``L_pair``: the same cross-entropy across each example — the student's view of ``u``
   predicts the teacher's target of ``v`` and vice versa; ``L_hier`` keeps the levels nested
   through the learned parent map (:mod:`hir.models.losses`);
   ``L_nce`` = symmetric InfoNCE (temperature ``T``) between ``u`` and ``v`` with the pool as extra
   negatives; ``L_eng`` = BCE of the engagement head (type ``r``, age 0: as of ``t``) on the true
   pairs against pool and in-batch negatives, from the first narrow view's representations;
5. ``L = w_next L_next + w_proto L_proto + w_pair L_pair + w_hier L_hier + w_eng L_eng + w_nce L_nce``;
   AdamW with linear warm-up and cosine decay; the teacher follows ``θ_t ← m θ_t + (1 − m) θ_s`` with
   ``m = 1 − (1 − m₀)(cos(π t/T) + 1)/2`` rising from ``m₀`` to 1. Every ``grad_share_every``
   steps (on one process) the next record carries each weighted loss's share of the gradient norm,
   ``‖∇ w_k L_k‖ / Σ_j ‖∇ w_j L_j‖`` (``grad_share_<loss>``).

With ``cycles > 1`` the schedule restarts (warm restarts: the first cycle has ``steps`` steps, each
next one twice as many, and each decays from the peak again, the teacher's momentum too) and the
newest first contact of ``holdout_users`` users (at most a tenth; an engagement of funnel weight 1 or
more, not a view, where there are such) is held out of training; after
each cycle the student is scored on them (:mod:`hir.models.validation`, Recall@10). A cycle that
scores within one standard error of the best so far is kept (it is as good as the held-out examples
can tell, and has trained longer); training stops at the first cycle below that and brings the last
kept cycle's weights back (:func:`~hir.models.validation.kept_cycle`) — so how many passes the data
needs is measured, not set.

A snapshot without engagements of users with target-type nodes trains on every edge instead
(anchors and positives of every type, unit weights).

Every step draws its randomness from generators seeded by ``(seed, step, rank)``, so a run resumed
from a checkpoint reproduces the uninterrupted run. Under ``torchrun`` the student is wrapped in
``DistributedDataParallel`` (gloo on CPU, nccl on GPU); each rank samples its own examples and the
Sinkhorn column sums are reduced over ranks.

Checkpoints (:mod:`hir.models.checkpoint`) are written every ``checkpoint_every`` steps and at the
end; a :class:`Trainer` over a folder holding one resumes it.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn as nn
from hir.models import checkpoint
from hir.models.candidates import CandidateSampler
from hir.models.encoder import EncoderConfig
from hir.models.engagement import SECONDS_PER_DAY, in_batch_permutation
from hir.models.examples import CausalExamples, parse_funnel_weights, training_examples
from hir.models.graph import TemporalGraph
from hir.models.losses import (
    collapse_metrics,
    hierarchy_loss,
    info_nce,
    sampled_softmax,
    sinkhorn,
    soft_cross_entropy,
    standardize,
)
from hir.models.model import HIRModel, TrainConfig, WorldKnowledge
from hir.models.prior import CausalPopularity
from hir.models.sampler import SamplerConfig, ViewSampler
from hir.models.validation import HeldOutNext, first_contacts, hold_out, kept_cycle, no_worse


def step_seed(seed: int, step: int, rank: int = 0) -> int:
    """A 63-bit seed for ``(seed, step, rank)``, so each step's randomness is fixed in advance."""
    x = (seed * 1_000_003 + step) * 10_007 + rank
    return (x * 0x9E3779B97F4A7C15) % (1 << 63)


def cycle_fraction(config: TrainConfig, step: int) -> float:
    """How far ``step`` is into its learning-rate cycle (``TrainConfig.cycle_ends``), in ``[0, 1]``
    (1 from the end of the last cycle on): each cycle restarts the schedule."""
    start = 0
    for end in config.cycle_ends:
        if step < end:
            return (step - start) / (end - start)
        start = end
    return 1.0


def lr_at(config: TrainConfig, step: int) -> float:
    """Linear warm-up over ``warmup_steps`` (the first cycle only), then in each cycle cosine decay
    from the peak to ``min_lr_ratio · lr``."""
    peak = config.finetune_lr if config.warm_start else config.lr
    warm = min(1.0, (step + 1) / max(1, config.warmup_steps if not config.warm_start else 1))
    cosine = 0.5 * (1 + math.cos(math.pi * cycle_fraction(config, step)))
    return peak * warm * (config.min_lr_ratio + (1 - config.min_lr_ratio) * cosine)


def momentum_at(config: TrainConfig, step: int) -> float:
    """Teacher momentum ``m = 1 − (1 − m₀)(cos(π t/T) + 1)/2`` over each cycle, from ``ema_start`` to ``ema_end``."""
    t = cycle_fraction(config, step)
    return config.ema_end - (config.ema_end - config.ema_start) * (math.cos(math.pi * t) + 1) / 2


def _rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _all_reduce_sum(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x


@dataclass
class TrainResult:
    """What a finished run reports: final step, metrics history, checkpoint folder, parameter count."""

    step: int
    metrics: list[dict[str, float]]
    checkpoint: Path
    parameters: int
    seconds: float
    warm_started_from: str = ""
    cycle_recall: list[float] = dataclasses.field(default_factory=list)  # held-out Recall@k after each cycle
    selected_cycle: int = 0  # the cycle whose weights were kept (1-based; 0: no held-out choice)


class Trainer:
    """Trains :class:`HIRModel` on one graph snapshot; checkpoints into ``out_dir`` and resumes from it.

    Args:
        graph: the training snapshot.
        config: training configuration; ``encoder_config`` and ``sampler_config`` the model's.
        out_dir: checkpoint folder; an existing checkpoint there is resumed (same config required).
        wk: per-node world-knowledge vectors ``[N, d]`` or ``None``.
        device: torch device.
        log: called with each metrics record (a dict) as it is logged.
    """

    def __init__(
        self,
        graph: TemporalGraph,
        config: TrainConfig,
        encoder_config: EncoderConfig,
        sampler_config: SamplerConfig,
        out_dir: str | Path,
        wk: torch.Tensor | None = None,
        device: str | torch.device = "cpu",
        log: Callable[[dict[str, float]], None] | None = None,
    ):
        self.graph, self.config = graph, config
        self.encoder_config, self.sampler_config = encoder_config, sampler_config
        self.out_dir = Path(out_dir)
        self.device = torch.device(device)
        self.log = log or (lambda record: None)
        self.rank, self.world = _rank_world()
        self.wk = WorldKnowledge.of(wk)
        self.sampler = ViewSampler(graph, sampler_config)
        self._prepare_examples()
        torch.manual_seed(self.config.seed)
        self.student = HIRModel(encoder_config, self.config, max(1, len(graph.edge_types))).to(self.device)
        for table in self.student.item_tables():
            table.set_items(graph.entity_id[self.trained_items].to(self.device))
        self.teacher = copy.deepcopy(self.student)
        self.teacher.requires_grad_(False)
        # fused: one kernel over all parameters (3× faster than the per-tensor loop on the id table)
        self.optimizer = torch.optim.AdamW(self._param_groups(), lr=self.config.lr, betas=(0.9, 0.999), fused=True)
        self.step, self.metrics, self.warm_started_from = 0, [], ""
        self.cycle_recall: list[float] = []
        self.finished = False  # a later cycle stopped improving: the best one's weights are back
        self._shares: dict[str, float] = {}
        if not self._resume() and config.warm_start:
            self._warm_start(Path(config.warm_start))
        self.ddp = self._wrap()

    # --- set-up -------------------------------------------------------------------------------

    def _param_groups(self) -> list[dict[str, Any]]:
        """Matrices with weight decay; norms, biases and prototypes without; the hashed-id table with
        decay at ``id_lr_scale`` times the learning rate (``lr_scale``, applied by :meth:`train_step`),
        and the per-item tables (residuals, context), where there are any, at ``residual_lr_scale`` times it."""
        table = self.student.encoder.node.hashed.weight
        items = [t.weight for t in self.student.item_tables()]
        decay, plain = [], []
        for name, param in self.student.named_parameters():
            if param is not table and all(param is not t for t in items):
                (decay if param.ndim >= 2 and not name.startswith("prototypes") else plain).append(param)
        wd = self.config.weight_decay
        groups = [{"params": decay, "weight_decay": wd}, {"params": plain, "weight_decay": 0.0},
                  {"params": [table], "weight_decay": wd, "lr_scale": self.config.id_lr_scale}]
        if items:
            groups.append({"params": items, "weight_decay": wd, "lr_scale": self.config.residual_lr_scale})
        return groups

    def _prepare_examples(self) -> None:
        """The causal examples, the candidate pool over their target nodes and the causal prior."""
        graph, c = self.graph, self.config
        if graph.csr.num_edges == 0:
            raise ValueError("the snapshot has no edges to train on")
        weights = parse_funnel_weights(c.funnel_weights)
        self.examples, targets = training_examples(graph, c.target_types.split(","), weights, self.sampler.time_index)
        if len(self.examples) == 0:
            raise ValueError("the snapshot has no engagement before its cut-off to train on")
        held_out = None
        if c.total_cycles > 1 and c.holdout_users > 0:  # a choice between cycles needs examples it did not train on
            users = min(c.holdout_users, self.examples.anchor.unique().numel() // 10)  # the rest train
            eligible = first_contacts(graph, self.examples)
            if (eligible & self.examples.engagements()).any():  # the choice is about engagements, not views
                eligible &= self.examples.engagements()
            self.examples, held_out = hold_out(self.examples, users, eligible)
        self.candidates = CandidateSampler(graph.num_nodes, targets, self.examples, c.pool_alpha)
        self.trained_items = self.examples.positive.unique()  # the items an ItemResidual row is kept for
        if c.item_residual or c.item_context:
            self.config = c = dataclasses.replace(c, residual_rows=self.trained_items.numel())
        if c.steps == 0:  # one budget for any data: epochs over the examples, all processes together
            self.config = c = dataclasses.replace(c, steps=max(1, math.ceil(c.epochs * self.examples.pass_size() / (c.batch_size * self.world))))
        self.pool_size = max(1, min(c.pool_size, targets.numel()))  # M: no more draws than the catalogue has nodes
        half_life = c.prior_half_life_days * SECONDS_PER_DAY if c.prior_half_life_days > 0 else None
        self.prior = CausalPopularity(self.examples.positive, self.examples.time, half_life)
        self.validation = None if held_out is None or len(held_out) == 0 else HeldOutNext(
            graph, held_out, targets, self.prior, self.sampler_config, c.nce_temperature, self.wk)

    def _wrap(self) -> nn.Module:
        if self.world == 1:
            return self.student
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(self.student, device_ids=ids, broadcast_buffers=False)

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.student.parameters())

    # --- one step -----------------------------------------------------------------------------

    def _sample_examples(self, gen: torch.Generator) -> tuple[CausalExamples, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """A batch of ``B`` examples and the step's anchors ``[u, v, pool]`` with their view times.

        Returns ``(batch, anchors [2B + M], times, pairs)``: after the examples' two ends, the ``M``
        pool nodes — the softmax's shared candidates, drawn from ``q_pool``, pool node ``j`` at the
        time of example ``j mod B`` — so the first ``B`` pool nodes double as the engagement head's
        popularity-drawn negatives, row ``b``'s seen as of ``t_b`` like its positive. ``pairs``
        holds the row indices ``u``, ``v`` and ``pop``, ``perm`` (the in-batch negatives), and the
        examples' ``edge_type`` and ``age`` (0 days: each engagement is scored as of its own time).
        """
        b, m = self.config.batch_size, self.pool_size
        batch = self.examples.draw(b, gen)
        pool = self.candidates.draw(m, gen)
        anchors = torch.cat([batch.anchor, batch.positive, pool])
        times = torch.cat([batch.time, batch.time, batch.time[torch.arange(m) % b]])
        rows = torch.arange(b)
        pairs = {
            "u": rows, "v": b + rows, "pop": 2 * b + rows % m,
            "perm": in_batch_permutation(b, gen), "edge_type": batch.event_type, "age": torch.zeros(b),
        }
        return batch, anchors, times, {k: t.to(self.device) for k, t in pairs.items()}

    def _pair_exclusions(self, batch: CausalExamples, gen: torch.Generator) -> torch.Tensor | None:
        """``[2B + M]`` the node whose entries leave each student anchor's view (-1: none): with
        probability ``pair_dropout`` an example's user and positive lose their own earlier edges to
        each other (the user's view of the item it then buys), so the example is scored from the
        user's other engagements; ``None`` when ``pair_dropout`` is 0."""
        p = self.config.pair_dropout
        if p <= 0:
            return None
        dropped = torch.rand(batch.anchor.numel(), generator=gen) < p
        none = torch.full((self.pool_size,), -1, dtype=torch.int64)
        return torch.cat([torch.where(dropped, batch.positive, -1), torch.where(dropped, batch.anchor, -1), none])

    def _wk(self, view) -> tuple | None:
        return self.wk.per_token(view) if self.wk is not None else None

    def _targets(self, broad) -> tuple[torch.Tensor, torch.Tensor]:
        reduce = _all_reduce_sum if self.world > 1 else None
        with torch.no_grad():
            _, coarse, fine = self.teacher.embed(broad, self._wk(broad), self.config.backend)
        c = self.config
        if c.standardize_scores:
            coarse, fine = standardize(coarse), standardize(fine)
        return (sinkhorn(coarse, c.sinkhorn_eps, c.sinkhorn_iters, reduce), sinkhorn(fine, c.sinkhorn_eps, c.sinkhorn_iters, reduce))

    def _losses(self, step: int) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """The step's unweighted losses by name (``next, proto, pair, hier, eng, nce``) and its
        logged figures."""
        gen = torch.Generator().manual_seed(step_seed(self.config.seed, step, self.rank))
        torch.manual_seed(step_seed(self.config.seed + 1, step, self.rank))
        batch, anchors, times, pairs = self._sample_examples(gen)
        b, m, c = self.config.batch_size, self.pool_size, self.config
        tb = min(b, c.teacher_batch)
        taught = torch.cat([torch.arange(tb), b + torch.arange(tb)])  # the first tb users, then their positives
        broad = self.sampler.broad(anchors[taught], gen, times=times[taught]).to(self.device)
        exclude = self._pair_exclusions(batch, gen)
        narrow = [self.sampler.narrow(anchors, gen, times=times, exclude=exclude).to(self.device) for _ in range(c.narrow_views)]
        q_coarse, q_fine = self._targets(broad)
        outputs, eng, pos, neg = self.ddp(narrow, [self._wk(v) for v in narrow], self.config.backend, pairs)
        tau = c.student_temperature
        parent = self.student.prototypes.parent_map()
        u, v = pairs["u"], pairs["v"]
        tu, tv = torch.arange(tb, device=self.device), tb + torch.arange(tb, device=self.device)  # rows of ``taught``
        candidates = anchors[b:]  # the batch's positives, then the pool
        log_q = self.candidates.log_q(candidates, b, m).to(self.device)
        log_prior = self.prior.log_prior(candidates[None], batch.time[:, None]).to(self.device)
        nodes = candidates.to(self.device)
        weight = batch.weight.to(self.device)
        losses = dict.fromkeys(("next", "proto", "pair", "hier", "nce"), 0.0)
        for h, s_coarse, s_fine in outputs:
            negatives = h[2 * b:]
            s_coarse, s_fine = s_coarse[taught.to(self.device)], s_fine[taught.to(self.device)]
            losses["next"] = losses["next"] + sampled_softmax(
                h[u], torch.cat([h[v], negatives]), nodes, log_q, c.nce_temperature, log_prior, weight)
            losses["nce"] = losses["nce"] + info_nce(h[u], h[v], negatives, c.nce_temperature)
            losses["proto"] = losses["proto"] + 0.5 * (soft_cross_entropy(q_coarse, s_coarse / tau) + soft_cross_entropy(q_fine, s_fine / tau))
            losses["pair"] = losses["pair"] + 0.25 * sum(
                soft_cross_entropy(q[a], s[z] / tau) for q, s in ((q_coarse, s_coarse), (q_fine, s_fine)) for a, z in ((tu, tv), (tv, tu))
            )
            losses["hier"] = losses["hier"] + hierarchy_loss(
                q_coarse, q_fine, torch.softmax(s_coarse / tau, -1), torch.softmax(s_fine / tau, -1), parent)
        losses = {name: value / len(outputs) for name, value in losses.items()}
        losses["eng"] = eng
        parts = {f"loss_{name}": float(value.detach()) for name, value in losses.items()}
        parts["eng_margin"] = float(pos.mean() - neg.mean())
        recency = self.student.recency()
        if recency is not None:  # the users' recency pooling as learnt so far
            parts["recency_weight"], parts["recency_half_rank"] = (float(x.detach()) for x in recency)
        self._last = (outputs[0], pos, neg)
        return losses, parts

    def _weights(self) -> dict[str, float]:
        c = self.config
        return {"next": c.w_next, "proto": c.w_proto, "pair": c.w_pair, "hier": c.w_hier, "eng": c.w_eng, "nce": c.w_nce}

    def _gradient_shares(self, losses: dict[str, torch.Tensor]) -> dict[str, float]:
        """``grad_share_<name> = ‖∇ w L‖ / Σ ‖∇ w' L'‖`` over the student's parameters (graph kept)."""
        params = [p for p in self.student.parameters() if p.requires_grad]
        norms = {}
        for name, w in self._weights().items():
            if w == 0 or not losses[name].requires_grad:
                norms[name] = 0.0
                continue
            grads = torch.autograd.grad(w * losses[name], params, retain_graph=True, allow_unused=True)
            norms[name] = math.sqrt(sum(float(g.pow(2).sum()) for g in grads if g is not None))
        total = sum(norms.values()) or 1.0
        return {f"grad_share_{name}": value / total for name, value in norms.items()}

    def _ema(self, momentum: float) -> None:
        with torch.no_grad():
            teacher, student = list(self.teacher.parameters()), [s.detach() for s in self.student.parameters()]
            torch._foreach_lerp_(teacher, student, 1 - momentum)  # t ← m t + (1 − m) s, in one pass
            for t, s in zip(self.teacher.buffers(), self.student.buffers()):
                t.copy_(s)

    def train_step(self) -> dict[str, float]:
        """One optimiser step at ``self.step``; returns the loss parts."""
        step = self.step
        lr = lr_at(self.config, step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
        self.student.train()
        losses, parts = self._losses(step)
        loss = sum(w * losses[name] for name, w in self._weights().items())
        every = self.config.grad_share_every
        if every > 0 and (step + 1) % every == 0 and self.world == 1:  # DDP's reducer allows one backward
            self._shares = self._gradient_shares(losses)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.student.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self._ema(momentum_at(self.config, step))
        self.step += 1
        return {"loss": float(loss.detach()), **parts, "lr": lr}

    def _record(self, parts: dict[str, float]) -> None:
        (h, s_coarse, s_fine), pos, neg = self._last
        with torch.no_grad():
            coarse, fine = s_coarse.argmax(1), s_fine.argmax(1)
        record, self._shares = {"step": self.step, **parts, **self._shares}, {}
        record.update(collapse_metrics(coarse, fine, self.config.coarse, self.config.fine, h))
        if self.world > 1:
            loss = _all_reduce_sum(torch.tensor([record["loss"]], dtype=torch.float64)) / self.world
            record["loss"] = float(loss)
        self.metrics.append(record)
        self.log(record)

    # --- the loop -----------------------------------------------------------------------------

    def fit(self, stop_after: int | None = None) -> TrainResult:
        """Train until ``total_steps`` (or until step ``stop_after``, as if killed after a checkpoint).

        Checkpoints every ``checkpoint_every`` steps and at the end.
        """
        started = time.perf_counter()
        c = self.config
        end = c.total_steps if stop_after is None else min(stop_after, c.total_steps)
        while self.step < end and not self.finished:
            parts = self.train_step()
            if self.step % c.log_every == 0 or self.step == c.total_steps:
                self._record(parts)
            if self.step in c.cycle_ends and self.validation is not None:
                self._end_cycle()
            if self.finished or self.step % c.checkpoint_every == 0 or self.step == end:
                self.save()
        recall = self.cycle_recall
        return TrainResult(
            step=self.step, metrics=list(self.metrics), checkpoint=self.out_dir,
            parameters=self.parameter_count(), seconds=time.perf_counter() - started,
            warm_started_from=self.warm_started_from, cycle_recall=list(recall),
            selected_cycle=kept_cycle(recall, len(self.validation.held_out)) if self.validation is not None else 0,
        )

    def _end_cycle(self) -> None:
        """Score the cycle just ended on the held-out examples; keep its weights while the score
        stays within a standard error of the best, else bring the last kept cycle's back and finish
        (:func:`hir.models.validation.no_worse`)."""
        best = self.out_dir / "best"
        self.cycle_recall.append(self.validation.recall(self.student, self.config.backend, self.device))
        kept = no_worse(self.cycle_recall, len(self.validation.held_out))
        last = len(self.cycle_recall) == self.config.total_cycles
        if kept and not last:
            self._save_to(best)
        elif not kept:
            checkpoint.resume(best, self.student, self.teacher, self.optimizer, self._config_dict(), self.device)
            if self.world > 1:  # every rank has read it before rank 0 removes it
                dist.barrier()
        self.finished = last or not kept
        if self.finished and self.rank == 0:
            shutil.rmtree(best, ignore_errors=True)

    # --- checkpoints --------------------------------------------------------------------------

    def _config_dict(self) -> dict[str, Any]:
        return checkpoint.config_dict(self.config, self.encoder_config, self.sampler_config)

    def save(self) -> Path:
        """Write the checkpoint (rank 0; other ranks wait); ``state.json`` is written last."""
        return self._save_to(self.out_dir)

    def _save_to(self, folder: Path) -> Path:
        if self.rank == 0:
            checkpoint.save(folder, self.student, self.teacher, self.optimizer, self._config_dict(), {
                "step": self.step, "total_steps": self.config.total_steps, "metrics": self.metrics,
                "parameters": self.parameter_count(), "cycle_recall": self.cycle_recall, "finished": self.finished,
                "warm_started_from": self.warm_started_from, "world_size": self.world,
            })
        if self.world > 1:
            dist.barrier()
        return folder

    def _resume(self) -> bool:
        state = checkpoint.resume(self.out_dir, self.student, self.teacher, self.optimizer, self._config_dict(), self.device)
        if state is None:
            return False
        self.step, self.metrics = int(state["step"]), list(state["metrics"])
        self.cycle_recall, self.finished = list(state.get("cycle_recall", [])), bool(state.get("finished", False))
        self.warm_started_from = state.get("warm_started_from", "")
        return True

    def _warm_start(self, folder: Path) -> None:
        """Start from another run's weights (:func:`hir.models.checkpoint.warm_start`); the
        optimiser starts afresh."""
        checkpoint.warm_start(folder, self.student, self.teacher, self._config_dict())
        self.warm_started_from = str(folder)
