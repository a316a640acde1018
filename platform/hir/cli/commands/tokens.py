"""Show the Bag-of-Meaning tokens of one entity: ``hir tokens ENTITY_TYPE KEY``.

Each token is ``level * 1e9 + path`` (level 1 coarse; the path of codes 1 … level); its weight and, when the
``token_descriptions`` asset exists, its description (top terms and categories) are printed.
"""

from __future__ import annotations

import argparse

from hir.settings import Settings

HELP = "show the Bag-of-Meaning tokens of an entity, with weights and descriptions"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("entity_type", help="entity type, e.g. user, ad, product")
    parser.add_argument("key", help="source key of the entity")
    parser.add_argument("--partition", help="day YYYY-MM-DD (default: the newest bom_tokens partition)")
    parser.add_argument("--data-home", help="data home (default HIR_DATA_HOME or ./.hir)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from hir.models.quantizer import TOKEN_LEVEL_STRIDE
    from hir.tokens.bom import describe, find_bag, load_store

    store = load_store(settings, args.partition, with_vectors=False)
    bag = find_bag(store, args.entity_type, args.key)
    print(f"{args.entity_type} {args.key} (entity {bag['entity_id']}, partition {store.partition}): {len(bag['tokens'])} tokens")
    for token, weight in sorted(zip(bag["tokens"], bag["weights"]), key=lambda p: (p[0] // TOKEN_LEVEL_STRIDE, -p[1])):
        print(f"  {weight:.3f}  {token:>9}  {describe(store, token)}")
    return 0
