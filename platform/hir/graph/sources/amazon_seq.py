"""Amazon review sequences in the S3-Rec format (e.g. ``amazon_beauty``), read from a folder.

Files, found by name pattern so that every Amazon category of that format works:

* the sequence file ``*.txt`` (required; the one ``.txt`` not ending in ``_textual_ids.txt``):
  one user a line, ``user item item ...``, space-separated integer ids, in chronological order;
* ``*_datamaps.json`` (required): ``id2user`` / ``id2item`` map the integer ids to Amazon reviewer
  ids and ASINs (the entities' keys), ``id2attribute`` maps attribute ids to names;
* ``*_item2attributes.json`` (required): item id → attribute ids (its brand and categories);
* ``*_textual_ids.txt`` (optional): ``ASIN short text`` per item.

Timestamps. The format keeps only the order, so every interaction gets a synthetic time: the
``k``-th of a user's ``n`` items (``k = 0 .. n-1``) is at ``ANCHOR - (n - 1 - k)`` days with
``ANCHOR`` = 2015-01-01 00:00 UTC. Each user's last item is on 2015-01-01, the one before on
2014-12-31, and so on, so a daily chronological split with one validation and one test day
after cut-off 2014-12-31 00:00 is exactly the published leave-last-out protocol.

Output: events ``user → product`` of type ``purchase`` (``value`` 1.0); relations ``product →
brand`` (``of_brand``) and ``product → category`` (``in_category``) valid from the product's first
interaction; content text per product: its short text, then ``brand: ...`` and
``categories: ...`` (names HTML-unescaped); a brand's or category's content text is its name.

Brand or category. S3-Rec writes each item's attributes as ``[brand] + categories``, with the
brand first when the item has one, and records no type. An attribute is therefore taken as a
brand when it opens some item's list and never appears at a later position in any list; every
other attribute is a category. (In the public Beauty files the lists do not keep that order
consistently, so the split there is approximate.)

Rejected lines: a line without items, a token that is not an integer id, a user or item id that
is not in the datamaps, a user listed twice. An item repeated within a user's line is a repeat
purchase, not a duplicate.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from hir.errors import SourceError
from hir.graph.sources.base import SourceBatch, require_file
from hir.graph.sources.validate import LINE, Table, make_batch, read_lines
from hir.settings import Settings

SOURCE = "amazon_seq"
ANCHOR = pd.Timestamp("2015-01-01", tz="UTC")


def _one(folder: Path, pattern: str, what: str, exclude: str | None = None, required: bool = True) -> Path | None:
    found = sorted(p for p in folder.glob(pattern) if not (exclude and p.name.endswith(exclude)))
    if len(found) > 1:
        raise SourceError(f"{folder}: more than one {what} ({', '.join(p.name for p in found)})")
    if not found and required:
        raise SourceError(f"{folder}: no {what} ({pattern}) found")
    return found[0] if found else None


def _load_json(path: Path, what: str) -> dict:
    require_file(path, what)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SourceError(f"{path}: {what} is not valid JSON ({exc})") from None
    except RecursionError:
        raise SourceError(f"{path}: {what} is nested too deeply") from None


def _datamaps(path: Path) -> dict:
    maps = _load_json(path, "datamaps JSON")
    missing = [k for k in ("id2user", "id2item", "id2attribute") if not isinstance(maps.get(k), dict)]
    if missing:
        raise SourceError(f"{path}: datamaps JSON lacks the maps {', '.join(missing)}")
    return maps


def read_sequences(path: Path) -> tuple[Table, pd.Series]:
    """The sequence file's lines (a :class:`Table`, so that bad ones can be rejected) and each line's
    tokens ``[user, item, item, ...]`` (``[]`` for a blank line). The one parser of the format."""
    table = read_lines(path, "sequence file")
    first = table.frame["line"].iloc[0] if len(table.frame) else ""
    if "," in first or ";" in first:
        raise SourceError(f"{path}: wrong delimiter: expected space-separated ids (`user item item ...`), the first line holds {',' if ',' in first else ';'}")
    return table, table.frame["line"].astype(object).str.split()


def user_sequences(path: Path) -> tuple[list[str], list[list[str]]]:
    """User ids and their item ids, line by line as the sequence file holds them, without the datamaps
    (the published leave-last-out protocol reads the file alone). Blank lines are skipped; a line
    without items, or a file without users, raises :class:`SourceError` naming the file (and line)."""
    table, tokens = read_sequences(path)
    users, sequences = [], []
    for number, parts in zip(table.frame[LINE], tokens):
        if not parts:
            continue
        if len(parts) < 2:
            raise SourceError(f"{path}:{number}: user {parts[0]!r} has no items")
        users.append(parts[0])
        sequences.append(parts[1:])
    if not users:
        raise SourceError(f"{path}: no user sequences")
    return users, sequences


def _sequences(path: Path, maps: dict) -> tuple[Table, pd.DataFrame]:
    """Validate the sequence lines; return the table and one row per interaction (user, item, ts)."""
    table, tokens = read_sequences(path)
    table.frame = table.frame.assign(user=tokens.str[0].fillna(""), n_items=tokens.str.len().fillna(0) - 1)
    table.reject(table.frame["user"] == "", "empty line")
    table.reject(table.frame["n_items"] < 1, "no items after user", quote="user")
    flat = tokens.loc[table.frame.index].explode()
    bad = ~flat.str.fullmatch(r"\d+").astype(bool)
    table.reject(bad.groupby(level=0).any().loc[table.frame.index], "malformed id in line")
    table.reject(~table.frame["user"].isin(list(maps["id2user"])), "user id not in datamaps", quote="user")
    items = tokens.loc[table.frame.index].str[1:].explode()
    unknown = ~items.isin(list(maps["id2item"]))
    table.reject(unknown.groupby(level=0).any().loc[table.frame.index], "item id not in datamaps in line")
    table.duplicates(["user"], what="user")
    items = tokens.loc[table.frame.index].str[1:].explode()
    n = table.frame["n_items"].loc[items.index].to_numpy()
    position = items.groupby(level=0).cumcount().to_numpy()
    ts = ANCHOR - pd.to_timedelta(n - 1 - position, unit="D")
    pairs = pd.DataFrame({"user": table.frame["user"].loc[items.index].to_numpy(), "item": items.to_numpy(), "ts": ts})
    return table, pairs


def _item2attributes(path: Path) -> dict:
    """The item → attribute-id list map; any other shape is a one-line :class:`SourceError`."""
    item2attrs = _load_json(path, "item2attributes JSON")
    if not isinstance(item2attrs, dict):
        raise SourceError(f"{path}: item2attributes JSON is not a map of item id to attribute ids")
    for item, attrs in item2attrs.items():
        if not isinstance(attrs, list) or not all(isinstance(a, (int, str)) and not isinstance(a, bool) for a in attrs):
            raise SourceError(f"{path}: item {str(item)[:40]!r}: attributes must be a list of ids, got {str(attrs)[:40]!r}")
    return item2attrs


def _attribute_types(item2attrs: dict) -> dict[str, str]:
    """Attribute id → ``brand`` (opens a list, never later in any) or ``category``."""
    first = {str(v[0]) for v in item2attrs.values() if v}
    later = {str(a) for v in item2attrs.values() for a in v[1:]}
    every = first | later
    return {a: "brand" if a in first and a not in later else "category" for a in every}


def _item_attributes(item2attrs: dict, maps: dict) -> pd.DataFrame:
    """One row per (ASIN, attribute): ``asin, kind, name``."""
    kinds = _attribute_types(item2attrs)
    rows = [(iid, str(a)) for iid, attrs in item2attrs.items() for a in attrs]
    frame = pd.DataFrame(rows, columns=["item", "attr"])
    frame = frame[frame["item"].isin(list(maps["id2item"])) & frame["attr"].isin(list(maps["id2attribute"]))]
    return pd.DataFrame(
        {
            "asin": frame["item"].map(maps["id2item"]).to_numpy(),
            "kind": frame["attr"].map(kinds).to_numpy(),
            "name": frame["attr"].map(maps["id2attribute"]).map(html.unescape).to_numpy(),
        }
    ).drop_duplicates()


def read_item_texts(path: Path | None) -> pd.Series:
    """ASIN → short text from the ``*_textual_ids.txt`` file (empty when there is none)."""
    if path is None:
        return pd.Series(dtype=object)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: item text file is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not text.strip():  # an empty text file: no texts (str.partition of no lines has no columns)
        return pd.Series(dtype=object)
    lines = pd.Series(text.splitlines(), dtype=object).str.partition(" ")
    texts = pd.Series(lines[2].str.strip().to_numpy(), index=lines[0].to_numpy())
    return texts[~texts.index.duplicated()]  # an ASIN listed twice keeps its first text


def _content(asins: pd.Series, attrs: pd.DataFrame, texts: pd.Series) -> pd.DataFrame:
    joined = attrs.groupby(["asin", "kind"])["name"].agg(", ".join).unstack()
    # object dtype: a kind no item has (e.g. no brands at all) is an all-NaN column, float otherwise.
    joined = joined.reindex(index=asins, columns=["brand", "category"]).astype(object)
    parts = pd.DataFrame({"text": texts.reindex(asins).to_numpy()}, index=asins)
    parts["brand"] = ("brand: " + joined["brand"]).to_numpy()
    parts["category"] = ("categories: " + joined["category"]).to_numpy()
    # A comprehension, not DataFrame.apply: apply on zero rows returns a frame, not a column.
    text = pd.Series([" | ".join(v for v in r if isinstance(v, str) and v) for r in parts.itertuples(index=False, name=None)],
                     dtype=object)
    products = pd.DataFrame({"entity_type": "product", "source_key": asins.to_numpy(), "text": text.to_numpy()})
    names = attrs[["kind", "name"]].drop_duplicates()
    named = pd.DataFrame({"entity_type": names["kind"].to_numpy(), "source_key": names["name"].to_numpy(), "text": names["name"].to_numpy()})
    return pd.concat([products, named], ignore_index=True).assign(image_uri=None)


def read(path: Path, settings: Settings) -> SourceBatch:
    """Read the S3-Rec folder ``path``; ``settings`` is unused (no knobs)."""
    if not path.is_dir():
        raise SourceError(f"{path}: expected a folder with the S3-Rec sequence file and its JSON maps")
    seq = _one(path, "*.txt", "sequence file", exclude="_textual_ids.txt")
    maps_path = _one(path, "*_datamaps.json", "datamaps JSON")
    attrs_path = _one(path, "*_item2attributes.json", "item2attributes JSON")
    text_path = _one(path, "*_textual_ids.txt", "item text file", required=False)
    maps = _datamaps(maps_path)
    table, pairs = _sequences(seq, maps)
    pairs["user"] = pairs["user"].map(maps["id2user"])
    pairs["item"] = pairs["item"].map(maps["id2item"])
    events = pd.DataFrame({"src_type": "user", "src_key": pairs["user"], "dst_type": "product", "dst_key": pairs["item"],
                           "event_type": "purchase", "ts": pairs["ts"], "value": 1.0})
    first = pairs.groupby("item")["ts"].min()
    attrs = _item_attributes(_item2attributes(attrs_path), maps)
    attrs = attrs[attrs["asin"].isin(first.index)]
    relations = pd.DataFrame({"src_type": "product", "src_key": attrs["asin"], "dst_type": attrs["kind"],
                              "dst_key": attrs["name"], "relation": np.where(attrs["kind"] == "brand", "of_brand", "in_category"),
                              "valid_from": attrs["asin"].map(first)})
    content = _content(pd.Series(first.index), attrs, read_item_texts(text_path))
    files = [p for p in (seq, maps_path, attrs_path, text_path) if p is not None]
    return make_batch(SOURCE, path, files, [table], events=events, relations=relations, content=content)
