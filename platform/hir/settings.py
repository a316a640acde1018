"""One settings object for the whole platform: ``HIR_*`` environment variables over defaults.

Every other module reads its knobs from :class:`Settings`; nothing else looks at the
environment. ``Settings.from_env()`` is called once where a process starts (the command line, the
Dagster code location, the Feast repository, the ``torchrun`` entry point); from there the settings
travel as a value: assets receive them through the ``hir_settings`` resource
(:class:`hir.resources.SettingsResource`, whose ``values`` are :meth:`Settings.as_env`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from hir.errors import SettingsError

# Half-life in days of each edge type's time decay; types not listed use ``default_half_life_days``.
DEFAULT_HALF_LIVES = {
    "impression": 3.0,
    "view": 3.0,
    "pv": 3.0,
    "click": 7.0,
    "cart": 7.0,
    "fav": 14.0,
    "conversion": 21.0,
    "purchase": 21.0,
    "buy": 21.0,
    "followed_by": 21.0,
    "rating": 60.0,
    "tag": 60.0,
}

# First day of the daily partitions for each built-in source (its data starts there).
SOURCE_PARTITION_START = {
    "synthetic": "2026-01-01",
    "taobao_userbehavior": "2017-11-25",
    "taobao_ads": "2017-05-06",
    "movielens": "1996-03-29",
    "amazon_seq": "2014-01-01",
    "csv": "2000-01-01",
}


def _parse_mapping(text: str) -> dict[str, float]:
    """``"click=7,view=3"`` → ``{"click": 7.0, "view": 3.0}``."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"expected key=value, got {part!r}")
        out[key.strip()] = float(value)
    return out


@dataclass(frozen=True)
class Settings:
    """All platform settings. Each field ``name`` is read from ``HIR_<NAME>``."""

    # Where everything lives: warehouse, artefacts, Dagster instance, Feast repository data.
    data_home: Path = Path(".hir")
    # Paths given in settings must lie under the data home unless this is true.
    allow_outside_paths: bool = False
    threads: int = max(1, os.cpu_count() or 1)
    # DuckDB memory cap for the heavy queries (graph snapshots, benchmarks); it spills past this.
    duckdb_memory_limit: str = "4GB"
    # Where DuckDB spills past that cap (empty: <data home>/tmp/duckdb).
    duckdb_temp_directory: str = ""
    seed: int = 0
    # the encoder's own seed (-1: HIR_SEED): retrains over several seeds on the same data, which the
    # synthetic source generates from HIR_SEED
    train_seed: int = -1

    # Source: a built-in kind and, for the real-data kinds, a file or folder.
    source: str = "synthetic"
    source_path: str = ""
    # YAML column mapping for the ``csv`` source.
    csv_mapping: str = ""

    # Synthetic ecosystem size.
    synthetic_events: int = 1_000_000
    synthetic_days: int = 28
    synthetic_coarse: int = 8
    synthetic_fine: int = 6

    # Daily partitions: first day (defaults to the source's own start, see SOURCE_PARTITION_START).
    partition_start: str = ""

    # Graph snapshot: time decay and evaluation windows after the cut-off.
    half_life_days: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_HALF_LIVES))
    default_half_life_days: float = 14.0
    val_days: float = 1.0
    test_days: float = 1.0
    # Event types whose consecutive items of one user become followed_by edges (comma-separated;
    # empty turns them off).
    sequence_events: str = "purchase,buy,conversion"
    # Advance the previous partition's edge state by the new day's events instead of re-reading the
    # whole log (false: every snapshot is a full rebuild). See hir.graph.snapshot.
    snapshot_incremental: bool = True
    # Find late events by fingerprinting every day of the log at each snapshot instead of reading the
    # day fingerprints the loader keeps (event_days); also sees an event edited in place outside the
    # loader, at the cost of a scan of the whole log.
    snapshot_scan_days: bool = False

    # World knowledge.
    text_model: str = "all-MiniLM-L6-v2"
    text_batch_size: int = 128
    image_model: str = "ViT-B-32"
    image_checkpoint: str = ""
    image_pretrained: str = ""
    image_batch_size: int = 64
    embed_device: str = "cpu"

    # Self-supervised training (hir_encoder) and inference (entity_embeddings); see hir.models.trainer and hir.models.inference.
    # optimiser steps of a run from scratch; 0: as many as `train_epochs` passes over the examples take
    train_steps: int = 0
    train_epochs: float = 1.0  # with train_steps = 0: passes over the causal examples
    # at most this many learning-rate cycles (warm restarts, the first of train_steps, each next twice as
    # long), stopping at the first that predicts held-out users' newest first contacts no better, the
    # best kept (hir.models.trainer): on Amazon Beauty the second (3 passes) is kept, Recall@10 0.0674 ->
    # 0.0777; the synthetic default keeps the first (README, "Passes chosen on held-out first contacts")
    train_cycles: int = 2
    # users whose newest first contact (and everything of theirs after it) is held out to choose the
    # cycle; at most a tenth of the users
    train_holdout_users: int = 2000
    # causal examples per step (anchors = 2 x batch + pool): a step costs 2 + pool / batch student
    # views per example, and every positive of the batch is a negative of the other rows
    train_batch: int = 256
    train_dim: int = 64  # encoder width
    train_layers: int = 2
    train_heads: int = 4
    # encoder dropout while training: off, since one pass over the examples does not overfit (on Amazon
    # Beauty 0 gave Recall@10 0.0451 against 0.0436 at 0.1) and the masks cost ~7 % of a step
    train_dropout: float = 0.0
    # add each view's pooled hashed ids to the representation (hir.models.model.HIRModel.pooled_ids;
    # beside world knowledge their LayerNorm gain starts at 0), users pooling the ids of what they
    # engaged with, not their own: on the Taobao log, ids only, hir's Recall@50 went 0.0152 -> 0.0314
    # (ALS 0.0373); on Amazon Beauty Recall@10 0.0589 -> 0.067 (README, "Users pool what they engaged with")
    train_pooled_ids: bool = True
    # weight a user's pooled content and ids give its newest engagements, rho * 2^(-r / half_rank) for
    # the r-th newest (hir.models.model.pooling_weights): the start of both, which training learns
    # (0: off, the walk's landing probabilities alone)
    train_recency_pool: float = 16.0
    train_recency_half_rank: float = 1.0
    train_coarse: int = 8  # K1 coarse prototypes
    train_fine: int = 48  # K2 fine prototypes
    train_lr: float = 0.005
    # the hashed-id table's learning rate as a multiple of train_lr (an id's row is touched only by the
    # few examples its entity is in): 4 lifts Amazon Beauty's Recall@10 0.0674 -> 0.0711 and costs the
    # synthetic default 0.1483 -> 0.1395, as more passes do (README, "Users pool what they engaged with")
    train_id_lr_scale: float = 1.0
    # rows of the hashed-id table, three of which each id sums (hir.models.encoder.NodeEncoder.hashed_id):
    # 2^18 instead of 2^16 changed nothing beyond noise on Amazon Beauty, the synthetic default or the
    # Taobao funnel (README); a catalogue of millions of entities may want more
    train_hash_buckets: int = 1 << 16
    train_broad_tokens: int = 128  # teacher view size
    train_narrow_tokens: int = 16  # student view size
    train_broad_recent: int = 64  # the anchor's newest entries a teacher view holds first (recency)
    train_narrow_recent: int = 8  # the anchor's newest entries a student view holds first
    train_narrow_views: int = 1  # student views per anchor per step
    train_teacher_batch: int = 32  # examples per step whose two ends get the teacher's broad views
    # Loss weights: prototype cross-entropy, cross-edge pairs, hierarchy, engagement. The prototype
    # terms lowered to a quarter of the seed's (1, 1, 0.5): in a measured ablation (issue #19) each
    # step down raised next-engagement Recall@10; the engagement head, dropped, lowered it.
    train_w_proto: float = 0.25
    train_w_pair: float = 0.25
    train_w_hier: float = 0.125
    train_w_eng: float = 1.0
    train_w_nce: float = 0.0  # InfoNCE between the student representations of each example's two ends
    train_w_next: float = 1.0  # next-engagement sampled softmax: user -> what it engages with next
    # Node types a user's next engagement is predicted among (those present in the snapshot).
    train_target_types: str = "product,ad,movie,item"
    # Funnel weight of each event type as a positive (deeper weighs more; unlisted types give none),
    # "event:weight,..."; empty: hir.models.examples.DEFAULT_FUNNEL_WEIGHTS.
    train_funnel_weights: str = ""
    train_pool_size: int = 768  # shared popularity-drawn negatives per step (negatives = batch - 1 + pool >= 1000)
    train_pool_alpha: float = 0.75  # popularity exponent of that pool
    # a learnt vector of each item the run trains on, added to the encoder's (hir.models.model.ItemResidual):
    # items never trained on, new ones included, keep the encoder's vector alone. Over three seeds
    # Amazon Beauty's Recall@10 / NDCG@10 0.0770 / 0.0422 -> 0.0813 / 0.0454, the synthetic default
    # level (0.1451 -> 0.1468; README, "Item residuals"). And its learning rate as a multiple of
    # train_lr (a row learns only when its item is among a step's candidates; 10 was worse)
    train_item_residual: bool = True
    train_residual_lr_scale: float = 1.0
    # a second learnt vector of each trained item that only the users who engaged with it pool
    # (hir.models.model.HIRModel.pooled_ids): "i follows j" scored apart from "j follows i". Over three
    # seeds Amazon Beauty's NDCG@10 0.0454 -> 0.0468, Recall@10 level (0.0813 -> 0.0822); the synthetic
    # default lower at two seeds (README, "Item context"), so off
    train_item_context: bool = False
    # probability that an example's user and positive lose their own earlier edges to each other in the
    # student views (hir.models.trainer): the synthetic default's engagements are mostly funnel steps on
    # items the user already saw, its test purchases mostly items it never touched (README, "where the
    # synthetic gap is"; 0: off)
    train_pair_dropout: float = 1.0
    train_prior_half_life_days: float = 0.0  # decay of the log prior the softmax adds (0: counts, as scoring)
    train_grad_share_every: int = 50  # steps between measurements of each loss's share of the gradient
    train_checkpoint_every: int = 100
    train_log_every: int = 10
    # Warm-start a partition from the newest earlier partition's checkpoint, then fine-tune.
    warm_start: bool = True
    finetune_steps: int = 60
    embed_batch: int = 256  # anchors per inference batch

    # Bag-of-Meaning tokens (hir.models.quantizer, hir.tokens.bom).
    bom_codes: str = "16,64,256,256"  # codewords per level, coarse first; the count is M codebooks (a 4th level: hir_bom Beauty 0.80 → 0.85 × hir)
    bom_iterations: int = 8  # alternating rounds of codebook least squares and code update
    bom_train_sample: int = 100_000  # embeddings sampled to train the codebooks (all are encoded)
    bom_interests: int = 10  # strongest interests (most engaged entities) added to a user's bag
    bom_own_weight: float = 1.0  # a of m = a·own + (1 − a)·interests; 1 = own tokens only (synthetic: hir_bom/hir 0.81 at 1.0, 0.76 at 0.3, 0.70 at 0.5)
    bom_tokens_per_level: int = 8  # tokens kept per level in a bag (largest weights)
    bom_rerank: int = 200  # candidates re-ranked by embedding score in `hir retrieve` (0 = off)
    bom_query_probes: int = 100  # finest tokens in a query bag (hir_bom, `hir retrieve`); 0 = the query's own bag

    # Evaluation (assets/evaluation.py): baselines fitted by the evaluation (comma-separated
    # subset of popularity, cooccurrence, als, lightgcn, sasrec, text_world_knowledge; the neural
    # ones are slow on CPU), the bound on their epochs (0 = their configs' own) and how many seeds
    # (seed, seed + 1, ...) SASRec, hir_seq and its controls run at (mean and std over them).
    eval_baselines: str = "popularity,cooccurrence,als,text_world_knowledge"
    eval_max_epochs: int = 0
    eval_seeds: int = 1
    # The funnel order of event types, upper stages first: stages separated by "<", the event types
    # of one stage by "," (hir.evaluation.funnel). The last stage is the outcome a ranker predicts.
    funnel_stages: str = "impression,view,pv<click,cart,fav<buy,purchase,conversion"

    # Torch runtime: "auto" picks cuda when present.
    device: str = "auto"

    # Feast and the UI.
    feast_port: int = 6566
    # Feast online store: "sqlite" (a file under the data home), "redis" or "postgres" (a server at
    # online_url: redis://[:password@]host:port[/db] or rediss://… for TLS;
    # postgresql://user[:password]@host[:port]/database). See hir.serving.feast_store.online_store_config.
    online_store: str = "sqlite"
    online_url: str = ""
    # Executor of hir_job: "multi_or_in_process" (Dagster's default) or "k8s" (one pod per step;
    # needs `pip install 'hir[k8s]'`, see platform/deploy/).
    executor: str = "multi_or_in_process"
    ui_host: str = "127.0.0.1"
    ui_port: int = 3000

    @classmethod
    def from_env(cls, **overrides: Any) -> "Settings":
        """The process's settings: its ``HIR_*`` environment variables, then ``overrides``."""
        return cls.from_mapping(os.environ, **overrides)

    @classmethod
    def from_mapping(cls, env: Mapping[str, str], **overrides: Any) -> "Settings":
        """Settings from ``HIR_*`` values in ``env`` (others take their defaults), then ``overrides``."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = "HIR_" + f.name.upper()
            if name in env:
                values[f.name] = _convert(name, env[name], f)
        values.update(overrides)
        if "half_life_days" in overrides:  # as from the environment: given types over the defaults
            values["half_life_days"] = {**DEFAULT_HALF_LIVES, **overrides["half_life_days"]}
        return cls(**values).replace()

    def replace(self, **changes: Any) -> "Settings":
        """A copy with ``changes``; the data home is resolved to an absolute path."""
        changed = dataclasses.replace(self, **changes)
        return dataclasses.replace(changed, data_home=Path(changed.data_home).expanduser().resolve())

    def as_env(self) -> dict[str, str]:
        """The ``HIR_*`` values that rebuild these settings with :meth:`from_mapping` (defaults left out)."""
        defaults = Settings()
        env = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "data_home" and value == getattr(defaults, f.name):
                continue
            if isinstance(value, bool):
                text = "1" if value else "0"
            elif isinstance(value, Mapping):
                text = ",".join(f"{k}={v!r}" for k, v in sorted(value.items()))
            else:
                text = str(value)
            env["HIR_" + f.name.upper()] = text
        return env

    @property
    def warehouse_path(self) -> Path:
        return self.data_home / "warehouse.duckdb"

    @property
    def artifacts_dir(self) -> Path:
        return self.data_home / "artifacts"

    @property
    def dagster_home(self) -> Path:
        return self.data_home / "dagster"

    @property
    def inbox_dir(self) -> Path:
        return self.data_home / "inbox"

    @property
    def feast_dir(self) -> Path:
        return self.data_home / "feast"

    @property
    def partition_start_date(self) -> str:
        return self.partition_start or SOURCE_PARTITION_START.get(self.source, "2000-01-01")

    @property
    def sequence_event_types(self) -> list[str]:
        return [t.strip() for t in self.sequence_events.split(",") if t.strip()]

    def half_life(self, edge_type: str) -> float:
        return float(self.half_life_days.get(edge_type, self.default_half_life_days))

    def resolve_path(self, value: str | Path, what: str) -> Path:
        """Resolve a path setting; refuse one outside the data home unless allowed.

        ``what`` names the setting in the error message.
        """
        path = Path(value).expanduser().resolve()
        if not self.allow_outside_paths and not path.is_relative_to(self.data_home):
            raise SettingsError(
                f"{what}: {path} lies outside the data home {self.data_home}; "
                "set HIR_ALLOW_OUTSIDE_PATHS=1 to allow it"
            )
        return path


def _convert(name: str, raw: str, f: dataclasses.Field) -> Any:
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    try:
        if kind == "bool":
            if raw.strip().lower() in {"1", "true", "yes", "on"}:
                return True
            if raw.strip().lower() in {"0", "false", "no", "off", ""}:
                return False
            raise ValueError(f"expected true/false, got {raw!r}")
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "Path":
            return Path(raw)
        if kind.startswith("Mapping"):
            merged = dict(DEFAULT_HALF_LIVES)
            merged.update(_parse_mapping(raw))
            return merged
        return raw
    except ValueError as exc:
        raise SettingsError(f"{name}={raw!r}: {exc}") from None
