"""Retrieve entities for an entity (by default items for a user) by Bag-of-Meaning token overlap.

The default ``--type`` is the data's item type: the type the evaluation ranks for the partition
(:func:`evaluated_item_type`), e.g. ``product`` on Amazon Beauty. A type with no entities in the
index is a user mistake that names the types there are.

Scores every entity of the asked type by ``Σ_t q_t · w(t, e) / τ + log(1 + p_e)`` over the query's
bag tokens (each entity's log prior, :mod:`hir.tokens.bom`), then re-ranks the best
``HIR_BOM_RERANK`` by embedding score when the partition's embeddings exist. Where the query entity
has an embedding and the partition's quantizer is written, its bag is a query bag: the
``HIR_BOM_QUERY_PROBES`` finest tokens of the asked type nearest its embedding
(:meth:`~hir.tokens.bom.QueryProbe.bags`, with their ``τ``); otherwise its own bag (with the bags' ``τ``).
``--explain`` lists, per result, the matched tokens with their contributions and descriptions.
"""

from __future__ import annotations

import argparse

from hir.settings import Settings

HELP = "retrieve entities for a user (or any entity) by Bag-of-Meaning token overlap"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("key", metavar="USER_KEY", help="source key of the query entity")
    parser.add_argument("--k", type=int, default=20, help="results to show (default 20)")
    parser.add_argument("--type", help="entity type to retrieve (default: the item type the evaluation ranks)")
    parser.add_argument("--from", dest="query_type", default="user", help="entity type of the key (default user)")
    parser.add_argument("--partition", help="day YYYY-MM-DD (default: the newest bom_tokens partition)")
    parser.add_argument("--explain", action="store_true", help="show the matched tokens with descriptions")
    parser.add_argument("--data-home", help="data home (default HIR_DATA_HOME or ./.hir)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    import torch

    from hir.errors import SettingsError
    from hir.tokens.bom import coarse_token, describe, find_bag, load_store

    if args.k < 1:
        raise SettingsError(f"--k must be at least 1, got {args.k}")
    store = load_store(settings, args.partition)
    bag = find_bag(store, args.query_type, args.key)
    tokens = torch.tensor(bag["tokens"], dtype=torch.int64)
    weights = torch.tensor(bag["weights"], dtype=torch.float32)
    query_vector = None
    if store.vectors is not None:
        query_vector = store.vectors[int(torch.searchsorted(store.index.entity_ids, torch.tensor(bag["entity_id"])))]
    wanted = args.type or evaluated_item_type(settings, store.partition)
    if wanted not in store.index.type_names:
        raise SettingsError(f"no {wanted!r} entities in bom_tokens partition {store.partition}; "
                            f"types: {', '.join(store.index.type_names)}")
    temperature = store.temperature
    if store.probe is not None and query_vector is not None and args.query_type in store.probe.means:
        probed, probe_weights = store.probe.bags(query_vector.numpy()[None], args.query_type, wanted, settings.bom_query_probes)
        tokens, weights = torch.from_numpy(probed[0]), torch.from_numpy(probe_weights[0])
        temperature = store.query_temperature
    rows, scores = store.index.search(
        tokens, weights, args.k, entity_type=wanted, query_vector=query_vector,
        vectors=store.vectors, candidates=max(settings.bom_rerank, args.k) if settings.bom_rerank else 0,
        prior=store.prior, temperature=temperature,
    )
    keys = dict(zip(store.bags.column("entity_id").to_pylist(), store.bags.column("source_key").to_pylist()))
    print(f"{args.query_type} {args.key}: top {rows.numel()} {wanted} (partition {store.partition})")
    for rank, (row, score) in enumerate(zip(rows.tolist(), scores.tolist()), 1):
        entity = int(store.index.entity_ids[row])
        print(f"{rank:>3}. {wanted} {keys.get(entity, entity)}  score {score:.4f}")
        if args.explain:
            for token, contribution in store.index.explain(tokens, weights, row):
                coarse = coarse_token(token, store.probe.quantizer.config.codes) if store.probe is not None else token
                under = f"  (in {describe(store, coarse)})" if coarse != token else ""
                print(f"       {contribution:.3f}  {describe(store, token)}{under}")
    return 0


def evaluated_item_type(settings, partition: str) -> str:
    """The item type the evaluation ranks in ``partition``: ``item_type`` of the partition's split
    (:func:`hir.evaluation.data.partition_split`), as the ``baselines`` asset saved it when it ran, else
    computed from the warehouse the same way."""
    import json

    from hir.errors import SettingsError, SourceError
    from hir.evaluation.data import partition_split
    from hir.graph.warehouse import connect
    from hir.partitions import cutoff_of
    from hir.storage import Artifacts

    saved = Artifacts(settings.artifacts_dir).results("baselines", partition)
    if saved.exists():
        return json.loads(saved.read_text(encoding="utf-8"))["protocol"]["item_type"]
    with connect(settings.warehouse_path, read_only=True) as con:
        try:
            return partition_split(con, cutoff_of(partition), settings).info["item_type"]
        except SourceError as exc:
            raise SettingsError(f"cannot tell the item type the evaluation ranks ({exc}); pass --type") from None
