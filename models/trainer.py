"""Self-supervised training of the HIR encoder (DESIGN §7): cross-view distillation onto two levels
of prototypes with Sinkhorn-Knopp targets, plus an engagement head.

One step, for a batch of ``B`` training-window edges ``(u, v, r, Δ)`` per process:

1. anchors = ``[u, v, v_rand, v_pop]`` (``4B`` nodes): the edges' endpoints, uniform random
   nodes and popularity-weighted nodes (the engagement negatives double as anchors);
2. one broad view per anchor for the teacher and ``narrow_views`` narrow views for the student;
3. teacher (the EMA of the student, no gradient): ``z_t = proj(enc(broad))``, cosine scores to
   the coarse (``K₁``) and fine (``K₂``) prototypes, Sinkhorn-Knopp → balanced targets ``q``;
4. student on each narrow view: ``p = softmax(⟨z_s, c⟩/τ)`` at both levels;
   ``L_proto = mean_views [CE(q_coarse, p_coarse) + CE(q_fine, p_fine)] / 2``;
   ``L_pair``: the same cross-entropy across each positive edge — the student's view of ``u``
   predicts the teacher's target of ``v`` and vice versa, so engaged entities share prototypes
   whatever their type; ``L_hier`` keeps the levels nested through the learned parent map
   (:mod:`hir.models.losses`);
   ``L_nce`` = symmetric InfoNCE (temperature ``T``) between the student representations of ``u``
   and ``v``, with the other edges' ends, the random and the popularity anchors as negatives — it
   aligns users with what they engage with, across node types;
   ``L_eng`` = BCE of the engagement head on the true edges against random, popularity and
   in-batch negatives, from the first narrow view's representations;
5. ``L = w_proto L_proto + w_pair L_pair + w_hier L_hier + w_eng L_eng + w_nce L_nce``; AdamW with linear warm-up and cosine
   decay; the teacher follows ``θ_t ← m θ_t + (1 − m) θ_s`` with
   ``m = 1 − (1 − m₀)(cos(π t/T) + 1)/2`` rising from ``m₀`` to 1.

Every step draws its randomness from generators seeded by ``(seed, step, rank)``, so a run resumed
from a checkpoint reproduces the uninterrupted run. Under ``torchrun`` the student is wrapped in
``DistributedDataParallel`` (gloo on CPU, nccl on GPU); each rank samples its own anchors and the
Sinkhorn column sums are reduced over ranks.

Checkpoints (:mod:`hir.models.checkpoint`) are written every ``checkpoint_every`` steps and at the
end; a :class:`Trainer` over a folder holding one resumes it.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn as nn
from hir.models import checkpoint
from hir.models.encoder import EncoderConfig
from hir.models.engagement import (
    SECONDS_PER_DAY,
    in_batch_permutation,
    popularity_negatives,
    popularity_weights,
    random_negatives,
)
from hir.models.graph import TemporalGraph
from hir.models.losses import (
    collapse_metrics,
    hierarchy_loss,
    info_nce,
    sinkhorn,
    soft_cross_entropy,
    standardize,
)
from hir.models.model import HIRModel, TrainConfig, WorldKnowledge
from hir.models.sampler import SamplerConfig, ViewSampler


def step_seed(seed: int, step: int, rank: int = 0) -> int:
    """A 63-bit seed for ``(seed, step, rank)``, so each step's randomness is fixed in advance."""
    x = (seed * 1_000_003 + step) * 10_007 + rank
    return (x * 0x9E3779B97F4A7C15) % (1 << 63)


def lr_at(config: TrainConfig, step: int) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine decay to ``min_lr_ratio · lr``."""
    peak = config.finetune_lr if config.warm_start else config.lr
    total = max(1, config.total_steps)
    warm = min(1.0, (step + 1) / max(1, config.warmup_steps if not config.warm_start else 1))
    cosine = 0.5 * (1 + math.cos(math.pi * min(step, total) / total))
    return peak * warm * (config.min_lr_ratio + (1 - config.min_lr_ratio) * cosine)


def momentum_at(config: TrainConfig, step: int) -> float:
    """Teacher momentum ``m = 1 − (1 − m₀)(cos(π t/T) + 1)/2``, from ``ema_start`` to ``ema_end``."""
    t = min(step, config.total_steps) / max(1, config.total_steps)
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
        torch.manual_seed(config.seed)
        self.student = HIRModel(encoder_config, config, max(1, len(graph.edge_types))).to(self.device)
        self.teacher = copy.deepcopy(self.student)
        self.teacher.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self._param_groups(), lr=config.lr, betas=(0.9, 0.999))
        self.step, self.metrics, self.warm_started_from = 0, [], ""
        self._prepare_edges()
        if not self._resume() and config.warm_start:
            self._warm_start(Path(config.warm_start))
        self.ddp = self._wrap()

    # --- set-up -------------------------------------------------------------------------------

    def _param_groups(self) -> list[dict[str, Any]]:
        decay, plain = [], []
        for name, param in self.student.named_parameters():
            (decay if param.ndim >= 2 and not name.startswith("prototypes") else plain).append(param)
        return [{"params": decay, "weight_decay": self.config.weight_decay}, {"params": plain, "weight_decay": 0.0}]

    def _prepare_edges(self) -> None:
        csr = self.graph.csr
        if csr.num_edges == 0:
            raise ValueError("the snapshot has no edges to train on")
        self.edge_rows = torch.repeat_interleave(torch.arange(self.graph.num_nodes), csr.degree())
        self.edge_cumulative = torch.cumsum(csr.weight.double().clamp_min(1e-12), 0)
        self.pop_cumulative = popularity_weights(csr.degree())

    def _wrap(self) -> nn.Module:
        if self.world == 1:
            return self.student
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(self.student, device_ids=ids, broadcast_buffers=False)

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.student.parameters())

    # --- one step -----------------------------------------------------------------------------

    def _sample_pairs(self, gen: torch.Generator) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        b, n = self.config.batch_size, self.graph.num_nodes
        draws = torch.rand(b, generator=gen, dtype=torch.float64) * self.edge_cumulative[-1]
        entry = torch.searchsorted(self.edge_cumulative, draws, right=True).clamp_max(self.graph.csr.num_edges - 1)
        u, v = self.edge_rows[entry], self.graph.csr.indices[entry]
        anchors = torch.cat([u, v, random_negatives(n, b, gen), popularity_negatives(self.pop_cumulative, b, gen)])
        rows = torch.arange(4 * b).view(4, b)
        pairs = {
            "u": rows[0], "v": rows[1], "rand": rows[2], "pop": rows[3],
            "perm": in_batch_permutation(b, gen),
            "edge_type": self.graph.csr.edge_type[entry],
            "age": ((self.graph.cutoff - self.graph.csr.last_ts[entry]) / SECONDS_PER_DAY).float(),
        }
        return anchors, {k: t.to(self.device) for k, t in pairs.items()}

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

    def _losses(self, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        gen = torch.Generator().manual_seed(step_seed(self.config.seed, step, self.rank))
        torch.manual_seed(step_seed(self.config.seed + 1, step, self.rank))
        anchors, pairs = self._sample_pairs(gen)
        broad = self.sampler.broad(anchors, gen).to(self.device)
        narrow = [self.sampler.narrow(anchors, gen).to(self.device) for _ in range(self.config.narrow_views)]
        q_coarse, q_fine = self._targets(broad)
        outputs, eng, pos, neg = self.ddp(narrow, [self._wk(v) for v in narrow], self.config.backend, pairs)
        c, tau = self.config, self.config.student_temperature
        parent = self.student.prototypes.parent_map()
        u, v = pairs["u"], pairs["v"]
        proto, pair, hier, nce = 0.0, 0.0, 0.0, 0.0
        for h, s_coarse, s_fine in outputs:
            nce = nce + info_nce(h[u], h[v], torch.cat([h[pairs["rand"]], h[pairs["pop"]]]), c.nce_temperature)
            proto = proto + 0.5 * (soft_cross_entropy(q_coarse, s_coarse / tau) + soft_cross_entropy(q_fine, s_fine / tau))
            pair = pair + 0.25 * sum(
                soft_cross_entropy(q[a], s[b] / tau) for q, s in ((q_coarse, s_coarse), (q_fine, s_fine)) for a, b in ((u, v), (v, u))
            )
            hier = hier + hierarchy_loss(q_coarse, q_fine, torch.softmax(s_coarse / tau, -1), torch.softmax(s_fine / tau, -1), parent)
        proto, pair, hier, nce = (x / len(outputs) for x in (proto, pair, hier, nce))
        loss = c.w_proto * proto + c.w_pair * pair + c.w_hier * hier + c.w_eng * eng + c.w_nce * nce
        named = (("loss_proto", proto), ("loss_pair", pair), ("loss_hier", hier), ("loss_eng", eng), ("loss_nce", nce))
        parts = {name: float(value.detach()) for name, value in named}
        parts["eng_margin"] = float(pos.mean() - neg.mean())
        self._last = (outputs[0], pos, neg)
        return loss, parts

    def _ema(self, momentum: float) -> None:
        with torch.no_grad():
            for t, s in zip(self.teacher.parameters(), self.student.parameters()):
                t.mul_(momentum).add_(s.detach(), alpha=1 - momentum)
            for t, s in zip(self.teacher.buffers(), self.student.buffers()):
                t.copy_(s)

    def train_step(self) -> dict[str, float]:
        """One optimiser step at ``self.step``; returns the loss parts."""
        step = self.step
        lr = lr_at(self.config, step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.student.train()
        loss, parts = self._losses(step)
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
        record = {"step": self.step, **parts}
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
        end = self.config.total_steps if stop_after is None else min(stop_after, self.config.total_steps)
        while self.step < end:
            parts = self.train_step()
            if self.step % self.config.log_every == 0 or self.step == self.config.total_steps:
                self._record(parts)
            if self.step % self.config.checkpoint_every == 0 or self.step == end:
                self.save()
        return TrainResult(
            step=self.step, metrics=list(self.metrics), checkpoint=self.out_dir,
            parameters=self.parameter_count(), seconds=time.perf_counter() - started,
            warm_started_from=self.warm_started_from,
        )

    # --- checkpoints --------------------------------------------------------------------------

    def _config_dict(self) -> dict[str, Any]:
        return checkpoint.config_dict(self.config, self.encoder_config, self.sampler_config)

    def save(self) -> Path:
        """Write the checkpoint (rank 0; other ranks wait); ``state.json`` is written last."""
        if self.rank == 0:
            checkpoint.save(self.out_dir, self.student, self.teacher, self.optimizer, self._config_dict(), {
                "step": self.step, "total_steps": self.config.total_steps, "metrics": self.metrics,
                "parameters": self.parameter_count(),
                "warm_started_from": self.warm_started_from, "world_size": self.world,
            })
        if self.world > 1:
            dist.barrier()
        return self.out_dir

    def _resume(self) -> bool:
        state = checkpoint.resume(self.out_dir, self.student, self.teacher, self.optimizer, self._config_dict(), self.device)
        if state is None:
            return False
        self.step, self.metrics = int(state["step"]), list(state["metrics"])
        self.warm_started_from = state.get("warm_started_from", "")
        return True

    def _warm_start(self, folder: Path) -> None:
        """Start from another run's weights (:func:`hir.models.checkpoint.warm_start`); the
        optimiser starts afresh."""
        checkpoint.warm_start(folder, self.student, self.teacher, self._config_dict())
        self.warm_started_from = str(folder)
