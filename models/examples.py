"""Causal training examples ``(anchor, t, positive, weight)``: what an anchor engaged with next.

An example says that at time ``t`` the anchor (a user) engaged with ``positive`` (an entity of a
target type: a product, an ad) through an event of type ``r``, and weighs ``w_r``, the funnel weight
of that event type (deeper funnel events weigh more; types without a positive weight give no
examples). The anchor's views for it are sampled from entries strictly before ``t``
(``ViewSampler.broad(anchors, generator, times=t)``), so neither the engagement itself nor anything
after it is inside them.

From a snapshot (:func:`next_engagement_examples`) each stored edge from an anchor-type node to a
target-type node is one example at the edge's ``last_ts`` — the snapshot keeps one time per
``(src, dst, type)``, its newest event; that edge has ``last_ts = t``, so the time limit removes it
from the example's views. From raw events (:func:`causal_examples`) each event is one. The same
``(anchor, t, positive)`` reached by several event types is one example with the largest weight, and
examples are in time order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

import torch
from hir.models.graph import TemporalGraph, TimeIndex

# Funnel weights by event type: what a user is trained to engage with next, deeper weighing more.
# Exposure and browsing (impressions, views, page views) stay in the graph as context for the views
# but are not targets: views as targets at half a click's weight or more cost the synthetic default
# three times the encoder's time for no gain (README "Views as targets"), and impressions are what
# the system showed, not what the user chose. ``HIR_TRAIN_FUNNEL_WEIGHTS`` with ``view:0.5`` among its
# weights trains on views all the same. A type without a positive weight gives no examples.
DEFAULT_FUNNEL_WEIGHTS: dict[str, float] = {
    "impression": 0.0,
    "view": 0.0,
    "pv": 0.0,
    "click": 1.0,
    "rating": 1.0,
    "fav": 1.5,
    "cart": 2.0,
    "conversion": 3.0,
    "purchase": 3.0,
    "buy": 3.0,
}


@dataclass
class CausalExamples:
    """``X`` examples, one per row, in time order.

    Attributes:
        anchor: int64 ``[X]`` node of the anchor (whose views are sampled before ``time``).
        time: float64 ``[X]`` unix seconds of the engagement.
        positive: int64 ``[X]`` node engaged with at ``time``.
        event_type: int64 ``[X]`` edge-type id of the engagement.
        weight: float32 ``[X]`` funnel weight of that event type.
    """

    anchor: torch.Tensor
    time: torch.Tensor
    positive: torch.Tensor
    event_type: torch.Tensor
    weight: torch.Tensor

    def __len__(self) -> int:
        return int(self.anchor.numel())

    def take(self, rows: torch.Tensor) -> CausalExamples:
        """The examples at ``rows`` (int64 indices)."""
        return CausalExamples(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})

    def draw(self, size: int, generator: torch.Generator) -> CausalExamples:
        """``size`` examples drawn uniformly with replacement (a training batch)."""
        return self.take(torch.randint(0, len(self), (size,), generator=generator))

    def pass_size(self) -> float:
        """How many examples one pass over them counts: an example of funnel weight below 1 (a view)
        counts as that share of one, so the many shallow events lengthen a pass by their weight."""
        return float(self.weight.clamp(max=1.0).sum())

    def engagements(self) -> torch.Tensor:
        """bool ``[X]``: the examples of funnel weight 1 or more (clicks and deeper, not views)."""
        return self.weight >= 1.0

    def positive_share(self, num_nodes: int) -> torch.Tensor:
        """float64 ``[N]``: the share of examples whose positive is each node — the probability that
        a uniformly drawn example (:meth:`draw`) brings that node in as an in-batch candidate."""
        return torch.bincount(self.positive, minlength=num_nodes).double() / max(1, len(self))


def parse_funnel_weights(text: str) -> dict[str, float]:
    """``{"click": 1.0, ...}`` from ``"click:1,cart:2"`` (the settings' form; blanks ignored)."""
    pairs = [part.split(":") for part in text.split(",") if part.strip()]
    if any(len(pair) != 2 for pair in pairs):
        raise ValueError(f"funnel weights must read 'event:weight,...'; got {text!r}")
    return {name.strip(): float(weight) for name, weight in pairs}


def funnel_weights(edge_types: Sequence[str], weights: Mapping[str, float]) -> torch.Tensor:
    """float32 ``[R]``: the weight of each edge type by name (0 for types ``weights`` does not list)."""
    return torch.tensor([float(weights.get(name, 0.0)) for name in edge_types], dtype=torch.float32)


def causal_examples(
    anchor: torch.Tensor, positive: torch.Tensor, event_type: torch.Tensor, time: torch.Tensor, type_weight: torch.Tensor
) -> CausalExamples:
    """Examples from events: one per event of a positively weighted type, the same
    ``(anchor, time, positive)`` merged into one with the largest weight, in time order.

    Args:
        anchor, positive: int64 ``[E]`` the events' two ends (who engaged, with what).
        event_type: int64 ``[E]`` edge-type ids.
        time: ``[E]`` unix seconds.
        type_weight: ``[R]`` funnel weight per edge type (:func:`funnel_weights`).
    """
    weight = type_weight.float()[event_type]
    keep = weight > 0
    anchor, positive, event_type = anchor[keep].long(), positive[keep].long(), event_type[keep].long()
    time, weight = time[keep].double(), weight[keep]
    order = torch.argsort(weight, descending=True, stable=True)
    for key in (positive, anchor, time):
        order = order[torch.argsort(key[order], stable=True)]
    anchor, positive, event_type, time, weight = (x[order] for x in (anchor, positive, event_type, time, weight))
    first = torch.ones(anchor.numel(), dtype=torch.bool)
    first[1:] = (time[1:] != time[:-1]) | (anchor[1:] != anchor[:-1]) | (positive[1:] != positive[:-1])
    return CausalExamples(anchor=anchor[first], time=time[first], positive=positive[first], event_type=event_type[first], weight=weight[first])


def next_engagement_examples(
    graph: TemporalGraph,
    anchor_types: Sequence[str],
    target_types: Sequence[str],
    weights: Mapping[str, float] = DEFAULT_FUNNEL_WEIGHTS,
    min_history: int = 1,
    index: TimeIndex | None = None,
) -> CausalExamples:
    """The snapshot's engagements of anchor-type nodes with target-type nodes as causal examples.

    Every CSR entry ``u → v`` with ``u`` of an anchor type, ``v`` of a target type, an edge type of
    positive weight and ``last_ts`` before the cut-off is an engagement at ``last_ts`` (see the module
    doc); an example needs at least ``min_history`` entries of ``u`` strictly before it, so its views
    hold something besides the anchor.

    Args:
        graph: the snapshot.
        anchor_types: node types whose engagements are predicted (e.g. ``["user"]``).
        target_types: node types of the positives (e.g. ``["product"]`` or ``["ad"]``).
        weights: funnel weight by edge-type name (:data:`DEFAULT_FUNNEL_WEIGHTS`).
        min_history: entries of the anchor before ``t`` an example needs (0: every engagement).
        index: ``TimeIndex.of(graph.csr)`` when one is at hand (built here otherwise).
    """
    csr = graph.csr
    rows = csr.rows()
    anchor_ids = _type_ids(graph, anchor_types)
    target_ids = _type_ids(graph, target_types)
    engaged = torch.isin(graph.node_type[rows], anchor_ids) & torch.isin(graph.node_type[csr.indices], target_ids)
    engaged &= csr.last_ts < graph.cutoff
    examples = causal_examples(rows[engaged], csr.indices[engaged], csr.edge_type[engaged], csr.last_ts[engaged],
                               funnel_weights(graph.edge_types, weights))
    if min_history > 0:
        index = index or TimeIndex.of(csr)
        history = index.end_before(examples.anchor, examples.time) - csr.indptr[examples.anchor]
        examples = examples.take(torch.nonzero(history >= min_history).flatten())
    return examples


def training_examples(
    graph: TemporalGraph, target_types: Sequence[str], weights: Mapping[str, float], index: TimeIndex | None = None
) -> tuple[CausalExamples, torch.Tensor]:
    """The trainer's examples and the candidate nodes their positives are ranked among.

    Users' next engagements with the nodes of those ``target_types`` the snapshot has
    (:func:`next_engagement_examples`, ``min_history = 1``), or, where no event type of theirs has a
    positive weight (a log of views alone), every one of them at weight 1; a snapshot without any
    (no users, or no target type) falls back to every entry of a positively weighted edge type
    between any two nodes, or of any type with weight 1 when none is weighted, ranked among all nodes.

    Returns ``(examples, int64 candidate nodes)``.
    """
    present = [name for name in target_types if name in graph.node_types]
    if "user" in graph.node_types and present:
        for weighting in (weights, dict.fromkeys(graph.edge_types, 1.0)):  # a log of views alone trains on them
            examples = next_engagement_examples(graph, ["user"], present, weighting, 1, index)
            if len(examples):
                return examples, torch.nonzero(torch.isin(graph.node_type, _type_ids(graph, present))).flatten()
    if not any(weights.get(name, 0) > 0 for name in graph.edge_types):
        weights = dict.fromkeys(graph.edge_types, 1.0)
    examples = next_engagement_examples(graph, graph.node_types, graph.node_types, weights, 1, index)
    return examples, torch.arange(graph.num_nodes)


def _type_ids(graph: TemporalGraph, names: Sequence[str]) -> torch.Tensor:
    unknown = sorted(set(names) - set(graph.node_types))
    if unknown:
        raise ValueError(f"node type(s) {', '.join(unknown)} not in the snapshot's {graph.node_types}")
    return torch.tensor([graph.node_types.index(name) for name in names], dtype=torch.int64)
