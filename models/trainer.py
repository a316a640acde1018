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

Checkpoint folder (written atomically file by file, ``state.json`` last):
``model.safetensors`` (``student.*``, ``teacher.*``), ``optimizer.safetensors`` (AdamW moments),
``config.json`` (train, encoder and sampler configs) and ``state.json`` (step, metrics history,
RNG states, parameter count).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import random
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from hir.models.encoder import EncoderConfig, HIREncoder, gather_wk
from hir.models.engagement import (
    SECONDS_PER_DAY,
    EngagementHead,
    engagement_loss,
    in_batch_permutation,
    popularity_negatives,
    popularity_weights,
    random_negatives,
)
from hir.models.graph import TemporalGraph
from hir.models.losses import (
    Prototypes,
    collapse_metrics,
    hierarchy_loss,
    info_nce,
    sinkhorn,
    soft_cross_entropy,
    standardize,
)
from hir.models.sampler import SamplerConfig, ViewSampler
from safetensors.torch import load_file, save_file

CHECKPOINT_FILES = ("model.safetensors", "optimizer.safetensors", "config.json", "state.json")
# Fields that may differ between a checkpoint and a resumed run: they change no number.
RUNTIME_FIELDS = frozenset({"checkpoint_every", "log_every", "backend"})


class CheckpointMismatch(ValueError):
    """A checkpoint was written with a different configuration than the one requested."""


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run (with the encoder and sampler configs)."""

    steps: int = 300  # optimiser steps of a run from scratch
    batch_size: int = 64  # positive edges per step and process (anchors = 4 × batch_size)
    lr: float = 5e-3  # peak AdamW learning rate
    weight_decay: float = 0.04  # AdamW weight decay on matrices (not on norms, biases, prototypes)
    warmup_steps: int = 20  # linear learning-rate warm-up
    min_lr_ratio: float = 0.1  # cosine decay floor as a share of ``lr``
    ema_start: float = 0.9  # teacher momentum m₀ at step 0, rising to ``ema_end``
    ema_end: float = 1.0
    coarse: int = 8  # K₁ coarse prototypes
    fine: int = 48  # K₂ fine prototypes
    proj_dim: int = 64  # projection width in which prototypes live
    student_temperature: float = 0.1  # τ of the student's softmax
    sinkhorn_eps: float = 0.05  # ε of the Sinkhorn-Knopp targets
    sinkhorn_iters: int = 3
    standardize_scores: bool = True  # z-score teacher scores per prototype before Sinkhorn-Knopp
    narrow_views: int = 2  # narrow (student) views per anchor
    w_proto: float = 1.0  # weight of the prototype cross-entropy
    w_pair: float = 1.0  # weight of the cross-entity term: u's student predicts v's teacher target
    w_hier: float = 0.5  # weight of the hierarchy consistency
    w_eng: float = 1.0  # weight of the engagement loss
    w_nce: float = 4.0  # weight of the InfoNCE between the student representations of u and v
    nce_temperature: float = 0.1  # T of that InfoNCE
    grad_clip: float = 1.0  # max gradient norm
    checkpoint_every: int = 100  # steps between checkpoints (and one at the end)
    log_every: int = 10  # steps between metric records
    seed: int = 0
    backend: str = "dense"  # attention backend while training: dense (CPU) or flex (GPU)
    warm_start: str = ""  # checkpoint folder to start from (weights and prototypes), "" for scratch
    finetune_steps: int = 50  # steps of a warm-started run
    finetune_lr: float = 2e-3  # peak learning rate of a warm-started run

    @property
    def total_steps(self) -> int:
        return self.finetune_steps if self.warm_start else self.steps


class HIRModel(nn.Module):
    """Encoder, projection head, two-level prototypes and engagement head.

    With world knowledge, the representation is ``h = enc(view) + LN(W_c · pooled wk)`` (see
    :meth:`pooled_content`): content reaches ``h`` directly instead of only through attention.

    Args:
        encoder_config: the encoder's configuration (its ``dim`` is the representation width).
        config: the training configuration (prototype counts, projection width).
        num_edge_types: engagement types known to the engagement head.
    """

    def __init__(self, encoder_config: EncoderConfig, config: TrainConfig, num_edge_types: int):
        super().__init__()
        dim = encoder_config.dim
        self.encoder = HIREncoder(encoder_config)
        self.projector = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, config.proj_dim))
        self.prototypes = Prototypes(config.proj_dim, config.coarse, config.fine)
        self.engagement = EngagementHead(dim, num_edge_types, hidden=dim)
        self.content = nn.Sequential(nn.Linear(encoder_config.wk_dim, dim), nn.LayerNorm(dim)) if encoder_config.wk_dim else None

    def pooled_content(self, view, wk: tuple) -> torch.Tensor:
        """``LN(W_c · Σ_s a_s wk_s / Σ_s a_s)`` ``[B, dim]``: the view's world knowledge pooled with
        ``a_s = has_s · (p_s + [hop_s = 0])`` (``p`` the random-walk landing probability), so a node
        without content (a user) is described by the content of what it engaged with."""
        vectors, has = wk
        weight = has.float() * (view.rw_prob.clamp(0, 1) + (view.hop == 0).float())
        pooled = (weight.unsqueeze(-1) * vectors).sum(1) / weight.sum(1, keepdim=True).clamp_min(1e-6)
        return self.content(pooled)

    def embed(self, view, wk: tuple | None, backend: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Representation ``h`` ``[B, dim]`` and prototype scores ``([B, K₁], [B, K₂])`` of a view.

        ``wk`` is ``(vectors [B, S, d], has [B, S])`` from :meth:`WorldKnowledge.per_token` or ``None``.
        """
        h = self.encoder(view, wk=wk[0] if wk else None, backend=backend, has_wk=wk[1] if wk else None)
        if wk is not None and self.content is not None:
            h = h + self.pooled_content(view, wk)
        coarse, fine = self.prototypes.scores(self.projector(h))
        return h, coarse, fine

    def forward(self, views: list, wks: list, backend: str, pairs: dict[str, torch.Tensor]):
        """Student pass over narrow views and the engagement loss on the first view.

        Args:
            views, wks: narrow views and their per-token world knowledge (or ``None``).
            backend: attention backend.
            pairs: ``u, v, rand, pop`` row indices into the view batch, ``perm`` the in-batch
                permutation, ``edge_type`` and ``age`` (days) of the positive edges.

        Returns:
            ``(outputs, engagement loss, positive logits, negative logits)`` where ``outputs`` is
            one ``(h, coarse scores, fine scores)`` per view.
        """
        outputs = [self.embed(view, wk, backend) for view, wk in zip(views, wks)]
        h = outputs[0][0]
        v = h[pairs["v"]]
        loss, pos, neg = engagement_loss(
            self.engagement, h[pairs["u"]], v, [h[pairs["rand"]], h[pairs["pop"]], v[pairs["perm"]]],
            pairs["edge_type"], pairs["age"],
        )
        return outputs, loss, pos, neg


def encoder_config_for(graph: TemporalGraph, dim: int, layers: int, heads: int, wk_dim: int = 0, **extra: Any) -> EncoderConfig:
    """An encoder config sized for ``graph``: its node and edge types and metadata width.

    Args:
        graph: the snapshot; ``dim``, ``layers``, ``heads``: model size; ``wk_dim``: world
            knowledge width (0 for none); ``extra``: any other :class:`EncoderConfig` field.
    """
    return EncoderConfig(
        dim=dim, layers=layers, heads=heads, wk_dim=wk_dim,
        num_node_types=max(1, len(graph.node_types)), num_edge_types=max(1, len(graph.edge_types)),
        meta_dim=int(graph.node_features.shape[1]), **extra,
    )


def read_world_knowledge(path: str | Path, entity_id: torch.Tensor) -> torch.Tensor | None:
    """Per-node world knowledge ``[N, d]`` from ``world_knowledge.parquet`` (zero rows where an
    entity has none); ``None`` when the file is absent or empty.

    Args:
        path: the Parquet file (``entity_id``, ``vector`` fixed-size list of float32, …).
        entity_id: ``[N]`` the snapshot's entity ids, sorted ascending (node order).
    """
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        return None
    table = pq.read_table(path, columns=["entity_id", "vector"])
    if table.num_rows == 0:
        return None
    ids = torch.from_numpy(table.column("entity_id").to_numpy().astype(np.int64))
    vectors = table.column("vector").combine_chunks()
    width = vectors.type.list_size
    flat = torch.from_numpy(vectors.values.to_numpy(zero_copy_only=False).astype(np.float32)).view(-1, width)
    out = torch.zeros(entity_id.numel(), width)
    pos = torch.searchsorted(entity_id, ids).clamp_max(max(entity_id.numel() - 1, 0))
    found = entity_id[pos] == ids if entity_id.numel() else torch.zeros_like(ids, dtype=torch.bool)
    out[pos[found]] = flat[found]
    return out


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


def config_dict(config: TrainConfig, encoder: EncoderConfig, sampler: SamplerConfig) -> dict[str, Any]:
    """The JSON form of a run's configuration (``config.json``)."""
    return {"train": asdict(config), "encoder": asdict(encoder), "sampler": asdict(sampler)}


def check_config(saved: dict[str, Any], requested: dict[str, Any], where: Path, ignore: frozenset = RUNTIME_FIELDS) -> None:
    """Raise :class:`CheckpointMismatch` naming every field where ``saved`` and ``requested`` differ."""
    diffs = []
    for part in ("train", "encoder", "sampler"):
        old, new = saved.get(part, {}), requested[part]
        for key in sorted(set(old) | set(new)):
            if key in ignore or old.get(key) == new.get(key):
                continue
            diffs.append(f"{part}.{key}: checkpoint {old.get(key)!r} != requested {new.get(key)!r}")
    if diffs:
        raise CheckpointMismatch(f"checkpoint {where} was written with a different config: " + "; ".join(diffs))


def _atomic_save(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_json(path: Path, obj: Any) -> None:
    _atomic_save(path, lambda tmp: tmp.write_text(json.dumps(obj, indent=2, sort_keys=True)))


def rng_state() -> dict[str, Any]:
    """Python, NumPy and torch RNG states as JSON-friendly lists."""
    np_state = np.random.get_state()
    return {
        "python": [list(random.getstate()[1]), random.getstate()[0], random.getstate()[2]],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": torch.get_rng_state().tolist(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` recorded."""
    internal, version, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """AdamW state as flat tensors ``state.<param index>.<name>``."""
    out = {}
    for index, state in optimizer.state_dict()["state"].items():
        for name, value in state.items():
            out[f"state.{index}.{name}"] = torch.as_tensor(value).detach().cpu().contiguous()
    return out


def load_optimizer_tensors(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], device: torch.device) -> None:
    """Inverse of :func:`optimizer_tensors` for an optimiser over the same parameters."""
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value if name == "step" else value.to(device)
    current = optimizer.state_dict()
    optimizer.load_state_dict({"state": state, "param_groups": current["param_groups"]})


@dataclass
class WorldKnowledge:
    """Per-node world-knowledge vectors ``vectors`` ``[N, d]`` and ``has`` ``[N]`` (True where a node has any)."""

    vectors: torch.Tensor
    has: torch.Tensor

    @classmethod
    def of(cls, vectors: torch.Tensor | None) -> "WorldKnowledge | None":
        """Wrap ``[N, d]`` vectors (all-zero rows mean "none"); ``None`` stays ``None``."""
        if vectors is None:
            return None
        vectors = vectors.float()
        return cls(vectors, vectors.ne(0).any(dim=1))

    def per_token(self, view) -> tuple[torch.Tensor, torch.Tensor]:
        """``([B, S, d] vectors, [B, S] has)`` of the view's tokens (see :func:`gather_wk`)."""
        device = view.node.device
        return gather_wk(view, self.vectors.to(device), self.has.to(device))


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
        return config_dict(self.config, self.encoder_config, self.sampler_config)

    def save(self) -> Path:
        """Write the checkpoint (rank 0; other ranks wait); ``state.json`` is written last."""
        if self.rank == 0:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            meta = {"step": str(self.step)}
            weights = {f"student.{k}": v for k, v in self.student.state_dict().items()}
            weights.update({f"teacher.{k}": v for k, v in self.teacher.state_dict().items()})
            weights = {k: v.detach().cpu().contiguous() for k, v in weights.items()}
            _atomic_save(self.out_dir / "model.safetensors", lambda p: save_file(weights, str(p), metadata=meta))
            opt = optimizer_tensors(self.optimizer)
            _atomic_save(self.out_dir / "optimizer.safetensors", lambda p: save_file(opt, str(p), metadata=meta))
            _write_json(self.out_dir / "config.json", self._config_dict())
            _write_json(self.out_dir / "state.json", {
                "step": self.step, "total_steps": self.config.total_steps, "metrics": self.metrics,
                "rng": rng_state(), "parameters": self.parameter_count(),
                "warm_started_from": self.warm_started_from, "world_size": self.world,
            })
        if self.world > 1:
            dist.barrier()
        return self.out_dir

    def _resume(self) -> bool:
        if not (self.out_dir / "state.json").exists():
            return False
        saved = json.loads((self.out_dir / "config.json").read_text())
        check_config(saved, self._config_dict(), self.out_dir)
        state = json.loads((self.out_dir / "state.json").read_text())
        weights = _load_checked(self.out_dir / "model.safetensors", state["step"])
        self.student.load_state_dict(_prefixed(weights, "student."))
        self.teacher.load_state_dict(_prefixed(weights, "teacher."))
        load_optimizer_tensors(self.optimizer, _load_checked(self.out_dir / "optimizer.safetensors", state["step"]), self.device)
        self.step, self.metrics = int(state["step"]), list(state["metrics"])
        self.warm_started_from = state.get("warm_started_from", "")
        set_rng_state(state["rng"])
        return True

    def _warm_start(self, folder: Path) -> None:
        """Start from another run's weights: encoder, heads and prototypes (hashed id tables carry
        over, so new entities need no resizing); the optimiser starts afresh."""
        saved = json.loads((folder / "config.json").read_text())
        mine = self._config_dict()
        shape_fields = frozenset(set(saved.get("train", {})) - {"coarse", "fine", "proj_dim"})
        check_config({"train": saved["train"], "encoder": saved["encoder"], "sampler": mine["sampler"]}, mine, folder, ignore=shape_fields)
        weights = read_weights(folder / "model.safetensors")
        self.student.load_state_dict(_prefixed(weights, "student."))
        self.teacher.load_state_dict(_prefixed(weights, "teacher."))
        self.warm_started_from = str(folder)


class CheckpointError(ValueError):
    """A checkpoint file is not what it claims to be (e.g. a pickle in place of safetensors)."""


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file ``path``; anything else (a pickle, a torn file) raises
    :class:`CheckpointError` naming the file. Nothing here unpickles."""
    from safetensors import SafetensorError

    try:
        return load_file(str(path))
    except SafetensorError as exc:
        raise CheckpointError(f"{path}: not a safetensors checkpoint ({exc}); hir never loads pickles") from None


def _prefixed(weights: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}


def _load_checked(path: Path, step: int) -> dict[str, torch.Tensor]:
    """Load a safetensors file and check it belongs to the checkpoint of ``step``."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as fh:
            written = int((fh.metadata() or {}).get("step", -1))
    except SafetensorError as exc:
        raise CheckpointError(f"{path}: not a safetensors checkpoint ({exc}); hir never loads pickles") from None
    if written != int(step):
        raise CheckpointMismatch(f"{path} holds step {written} but state.json says step {step}; the checkpoint is torn")
    return read_weights(path)


def read_configs(folder: str | Path) -> tuple[TrainConfig, EncoderConfig, SamplerConfig]:
    """The three configs of a checkpoint folder."""
    saved = json.loads((Path(folder) / "config.json").read_text())
    return _from_dict(TrainConfig, saved["train"]), _from_dict(EncoderConfig, saved["encoder"]), _from_dict(SamplerConfig, saved["sampler"])


def _from_dict(cls, values: dict[str, Any]):
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in values.items() if k in names})


def load_model(folder: str | Path, num_edge_types: int, device: str | torch.device = "cpu", which: str = "student") -> HIRModel:
    """The ``student`` (default) or ``teacher`` model of a checkpoint folder, in eval mode.

    Inference uses the student: its engagement head and prototype predictions were fitted on
    exactly its representations, and in runs of a few hundred steps the EMA teacher lags it.
    """
    config, encoder_config, _ = read_configs(folder)
    model = HIRModel(encoder_config, config, num_edge_types)
    model.load_state_dict(_prefixed(read_weights(Path(folder) / "model.safetensors"), f"{which}."))
    return model.to(device).eval()


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
        model: a trained model (usually :func:`load_model`'s student).
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
            view = sample(anchors, gen).to(device)
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
            view = sampler.narrow(anchors, torch.Generator().manual_seed(seed)).to(device)
            per_token = knowledge.per_token(view) if knowledge else None
            dense = model.embed(view, per_token, "dense")[0]
            for _ in range(repeats):
                flex = model.embed(view, per_token, "flex")[0]
                diff = (flex - dense).abs().max().item() if torch.isfinite(flex).all() else math.inf
                worst = max(worst, diff)
    return worst

def kmeans(x: torch.Tensor, k: int, iters: int = 25, seed: int = 0) -> torch.Tensor:
    """Spherical k-means of the rows of ``x`` ``[N, d]``: labels ``[N]`` int64 in ``[0, k)``.

    Rows are L2-normalised; centres start at ``k`` k-means++ picks and alternate
    ``label_i = argmax_j ⟨x_i, c_j⟩`` and ``c_j = normalise(Σ_{label_i = j} x_i)`` (an emptied
    centre is re-seeded at the row worst served by its centre). Deterministic for ``seed``.
    """
    n = x.shape[0]
    if n <= k:
        return torch.arange(n, dtype=torch.int64)
    x = nn.functional.normalize(x.float(), dim=1)
    gen = torch.Generator().manual_seed(seed)
    centres = x[torch.randint(n, (1,), generator=gen)]
    for _ in range(1, k):
        gap = (1 - (x @ centres.T).max(dim=1).values).clamp_min(0) ** 2
        centres = torch.cat([centres, x[torch.multinomial(gap + 1e-12, 1, generator=gen)]])
    for _ in range(iters):
        sim = x @ centres.T
        labels = sim.argmax(dim=1)
        sums = torch.zeros_like(centres).index_add_(0, labels, x)
        empty = torch.bincount(labels, minlength=k) == 0
        if empty.any():
            worst = sim.max(dim=1).values.argsort()[: int(empty.sum())]
            sums[empty] = x[worst]
        centres = nn.functional.normalize(sums, dim=1)
    return (x @ centres.T).argmax(dim=1)


def nested_clusters(embedding: torch.Tensor, node_type: torch.Tensor, coarse: int, fine: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Two-level interest clusters of embeddings, free of the node-type offset.

    Each node type's mean is subtracted from its normalised embeddings (so clusters follow content,
    not type); spherical :func:`kmeans` gives ``coarse`` clusters, then inside coarse cluster ``c``
    a k-means into ``fine // coarse`` clusters gives fine label ``c · (fine // coarse) + j``, so every
    fine cluster nests in exactly one coarse cluster.

    Args:
        embedding: ``[N, d]`` representations; ``node_type``: ``[N]`` int64 type ids.
        coarse: ``K₁``; ``fine``: ``K₂`` (``K₂ // K₁`` children per coarse cluster, at least 1).
        seed: k-means seed.

    Returns:
        ``(coarse [N], fine [N])`` int64 labels.
    """
    x = nn.functional.normalize(embedding.float(), dim=1)
    for t in node_type.unique():
        rows = node_type == t
        x[rows] = x[rows] - x[rows].mean(dim=0)
    top = kmeans(x, coarse, seed=seed)
    per = max(1, fine // max(1, coarse))
    low = torch.zeros_like(top)
    for c in range(coarse):
        rows = (top == c).nonzero().squeeze(1)
        if rows.numel():
            low[rows] = kmeans(x[rows], per, seed=seed + 1 + c)
    return top, top * per + low
