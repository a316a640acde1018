"""``hir lookup ENTITY_TYPE KEY [KEY …]``: online features of entities from the Feast online store
(whichever the ``online_store`` setting names).

Keys are the source's own keys (the Feast join key ``<type>_key``). A key the store does not hold
comes back with ``found: false`` and null features, never an error.
"""

from __future__ import annotations

import argparse
import json

from hir.errors import SettingsError
from hir.settings import Settings

HELP = "read the online features (embedding, BoM tokens, interests) of entities by key"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("entity_type", help="entity type, e.g. user, ad, product")
    parser.add_argument("keys", nargs="+", metavar="KEY", help="source keys of the entities")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--data-home", help="data home (default HIR_DATA_HOME or ./.hir)")


def lookup(feast: "FeastStore", entity_type: str, keys: list[str]) -> list[dict]:  # noqa: F821
    """One dict per key: ``key``, ``found`` and every feature of ``hir.serving.feast_store.FEATURES`` (None when missing).

    ``feast`` is the store to read; raises ``SettingsError`` when nothing was applied yet or the
    type has no feature view.
    """
    from hir.serving.feast_store import FEATURES, join_key, type_name, view_name

    t = type_name(entity_type)
    feast.require_registry()
    store = feast.store()
    views = {v.name for v in store.list_feature_views()}
    if view_name(t) not in views:
        known = sorted(v.removesuffix("_features") for v in views)
        raise SettingsError(f"unknown entity type {entity_type!r}; known: {', '.join(known)}")
    got = feast.online(t, keys, reader=feast.reader(store))
    return [{"key": key, "found": got["entity_id"][i] is not None, **{f: got[f][i] for f in FEATURES}}
            for i, key in enumerate(got[join_key(t)])]


def run(args: argparse.Namespace, settings: Settings) -> int:
    from hir.serving.feast_store import FeastStore

    rows = lookup(FeastStore.from_settings(settings), args.entity_type, list(args.keys))
    if args.json:
        print(json.dumps({"entity_type": args.entity_type, "rows": rows}))
        return 0
    for row in rows:
        if not row["found"]:
            print(f"{row['key']}: missing")
            continue
        vec = row["hir_embedding"] or []
        print(f"{row['key']}: entity_id={row['entity_id']} model={row['model_version']} "
              f"coarse={row['coarse_interest']} fine={row['fine_interest']} tokens={row['bom_tokens']} "
              f"embedding[{len(vec)}]={[round(x, 4) for x in vec[:6]]}{' …' if len(vec) > 6 else ''}")
    return 0
