"""The one mapping from settings to everything a training run needs.

The ``hir_encoder`` asset, the training benchmarks and the ``torchrun`` entry point all build their
configs here, so a checkpoint written by one is the checkpoint another expects (a checkpoint
stores its configs and is refused when they differ, see ``hir.models`` checkpoint checks).
"""

from __future__ import annotations

from typing import NamedTuple

from hir.errors import SettingsError
from hir.models.encoder import EncoderConfig
from hir.models.examples import parse_funnel_weights
from hir.models.model import TrainConfig, encoder_config_for
from hir.models.sampler import SamplerConfig
from hir.settings import Settings


class TrainingConfigs(NamedTuple):
    """``Trainer(graph, *configs, ...)`` takes them in this order."""

    train: TrainConfig
    encoder: EncoderConfig
    sampler: SamplerConfig


def engagement_edge_types(graph, funnel_weights: str) -> list[int]:
    """Ids of the snapshot's edge types with a positive funnel weight (a user's engagements); all of
    them where none has one, as a log of views alone trains on its views."""
    weights = parse_funnel_weights(funnel_weights)
    engaged = [i for i, name in enumerate(graph.edge_types) if weights.get(name, 0) > 0]
    return engaged or list(range(len(graph.edge_types)))


def training_backend(device_type: str) -> str:
    """FlexAttention trains on GPU; on CPU it has no backward, so training there is dense."""
    return "flex" if device_type == "cuda" else "dense"


def training_configs(settings: Settings, graph, wk_dim: int = 0, device_type: str = "cpu",
                     warm_start: str = "") -> TrainingConfigs:
    """Train, encoder and sampler configs of ``settings`` for ``graph``.

    Args:
        settings: the ``HIR_TRAIN_*`` sizes, loss weights, next-engagement task (target types,
            funnel weights, candidate pool, prior), recency (views and pooling) and schedule, ``HIR_SEED``,
            ``HIR_FINETUNE_STEPS``.
        graph: the snapshot (a ``TemporalGraph``); its node and edge types size the encoder.
        wk_dim: width of the world-knowledge vectors (0: none).
        device_type: ``"cpu"`` or ``"cuda"``; picks the training attention backend.
        warm_start: checkpoint folder to fine-tune from ("" trains from scratch).
    """
    train = TrainConfig(
        steps=settings.train_steps, epochs=settings.train_epochs, cycles=settings.train_cycles,
        holdout_users=settings.train_holdout_users, batch_size=settings.train_batch, lr=settings.train_lr,
        id_lr_scale=settings.train_id_lr_scale,
        coarse=settings.train_coarse, fine=settings.train_fine, w_proto=settings.train_w_proto,
        w_pair=settings.train_w_pair, w_hier=settings.train_w_hier, w_eng=settings.train_w_eng,
        w_nce=settings.train_w_nce, w_next=settings.train_w_next, target_types=settings.train_target_types,
        funnel_weights=settings.train_funnel_weights or TrainConfig.funnel_weights, pool_size=settings.train_pool_size,
        pool_alpha=settings.train_pool_alpha, item_residual=settings.train_item_residual,
        item_context=settings.train_item_context,
        residual_lr_scale=settings.train_residual_lr_scale, pair_dropout=settings.train_pair_dropout, prior_half_life_days=settings.train_prior_half_life_days,
        grad_share_every=settings.train_grad_share_every, narrow_views=settings.train_narrow_views,
        teacher_batch=settings.train_teacher_batch,
        checkpoint_every=settings.train_checkpoint_every, log_every=settings.train_log_every,
        seed=settings.seed if settings.train_seed < 0 else settings.train_seed, backend=training_backend(device_type), warm_start=warm_start,
        finetune_steps=settings.finetune_steps,
    )
    if settings.train_cycles < 1 or settings.train_holdout_users < 0:
        raise SettingsError(f"HIR_TRAIN_CYCLES={settings.train_cycles} must be ≥ 1 and "
                            f"HIR_TRAIN_HOLDOUT_USERS={settings.train_holdout_users} ≥ 0 (0: every cycle runs)")
    if settings.train_hash_buckets < 1:
        raise SettingsError(f"HIR_TRAIN_HASH_BUCKETS={settings.train_hash_buckets} must be ≥ 1")
    if settings.train_id_lr_scale <= 0:
        raise SettingsError(f"HIR_TRAIN_ID_LR_SCALE={settings.train_id_lr_scale:g} must be > 0 (1: the shared learning rate)")
    if settings.train_residual_lr_scale <= 0:
        raise SettingsError(f"HIR_TRAIN_RESIDUAL_LR_SCALE={settings.train_residual_lr_scale:g} must be > 0 (1: the shared learning rate)")
    if settings.train_item_context and not settings.train_pooled_ids:
        raise SettingsError("HIR_TRAIN_ITEM_CONTEXT=1 needs HIR_TRAIN_POOLED_IDS=1 (the users pool the context vectors with their ids)")
    if not 0 <= settings.train_pair_dropout <= 1:
        raise SettingsError(f"HIR_TRAIN_PAIR_DROPOUT={settings.train_pair_dropout:g} must lie in [0, 1] (a probability)")
    if settings.train_recency_pool < 0 or settings.train_recency_half_rank <= 0:
        raise SettingsError(
            f"HIR_TRAIN_RECENCY_POOL={settings.train_recency_pool:g} must be ≥ 0 (0: off) and "
            f"HIR_TRAIN_RECENCY_HALF_RANK={settings.train_recency_half_rank:g} > 0"
        )
    encoder = encoder_config_for(graph, settings.train_dim, settings.train_layers, settings.train_heads, wk_dim=wk_dim,
                                 dropout=settings.train_dropout, hash_buckets=settings.train_hash_buckets,
                                 pooled_ids=settings.train_pooled_ids, pool_direct=True,
                                 recency_weight=settings.train_recency_pool, recency_half_rank=settings.train_recency_half_rank,
                                 recency_edge_types=engagement_edge_types(graph, train.funnel_weights))
    sampler = SamplerConfig(broad_tokens=settings.train_broad_tokens, narrow_tokens=settings.train_narrow_tokens,
                            broad_recent=settings.train_broad_recent, narrow_recent=settings.train_narrow_recent)
    return TrainingConfigs(train, encoder, sampler)
