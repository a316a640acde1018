"""The ``csv`` source: any event log and catalogue, mapped to the canonical tables by a YAML file.

The mapping is the file named by the ``csv_mapping`` setting (``HIR_CSV_MAPPING``) or, when that
is empty, ``mapping.yaml`` beside the data (in the folder ``path``, or beside the file ``path``).
File names in the mapping are relative to the data folder (the folder ``path``, or the folder
holding the file ``path``); a section without ``file`` reads the file ``path`` itself.

.. code-block:: yaml

    delimiter: ","                 # default for every file
    events:                        # interactions; every field below is checked per row
      - file: events.csv
        src: {type: user, column: user_id}
        dst: {type: product, column: item_id}
        event_type: {constant: view}          # or {column: action, allowed: [view, cart, buy]}
        ts: {column: time, format: unix_s}    # unix_s | unix_ms | iso | a strftime pattern
        value: {column: price}                # optional; default 1.0
    entities:                      # catalogue rows: one entity each, with content
      - file: items.csv
        type: product
        key: item_id
        text: [title, category]               # non-empty values joined with " | "
        image: {column: image, dir: images}   # optional: file name under <the CSV's folder>/<dir>
        attrs: [colour, year]                 # optional: stored as JSON (empty → null)
        first_seen: {column: listed, format: iso}  # optional
    relations:
      - file: items.csv
        src: {type: product, column: item_id}
        dst: {type: category, column: category}
        relation: in_category
        valid_from: {column: listed, format: iso}  # optional; or {constant: "2020-01-01"}

Every file is read once, with a header; its rows are checked against every section that uses it
(required keys, timestamps, allowed event types, numbers, image files that exist) and exact
repeated rows are rejected, so each input row is accepted or rejected once. A relation whose
``dst`` column is empty in a row, or that would link an entity to itself, is not emitted for that
row (the row may still give an entity).
A relation without ``valid_from`` is valid from its src entity's first event in the input, else
from the input's first event; with no events at all it has none (NULL), and graph snapshots,
which take relations valid before their cut-off, leave it out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from hir.errors import SourceError
from hir.graph.sources.base import SourceBatch
from hir.graph.sources.validate import Table, json_records, make_batch, read_table
from hir.settings import Settings

SOURCE = "csv"
SECTIONS = ("events", "entities", "relations")
TIME_FORMAT_DEFAULT = "unix_s"


def _mapping_path(path: Path, settings: Settings) -> Path:
    if settings.csv_mapping:
        return Path(settings.csv_mapping).expanduser()
    return (path if path.is_dir() else path.parent) / "mapping.yaml"


def load_mapping(path: Path) -> dict[str, Any]:
    """Parse and shape-check the YAML mapping at ``path``; raise one-line :class:`SourceError`s."""
    if not path.is_file():
        raise SourceError(f"{path}: CSV mapping not found (set HIR_CSV_MAPPING or put mapping.yaml beside the data)")
    try:
        mapping = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SourceError(f"{path}: CSV mapping is not valid YAML: {' '.join(str(exc).split())}") from None
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: CSV mapping is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise SourceError(f"{path}: CSV mapping is nested too deeply") from None
    if not isinstance(mapping, dict) or not any(mapping.get(s) for s in SECTIONS):
        raise SourceError(f"{path}: CSV mapping needs at least one of the sections {', '.join(SECTIONS)}")
    for section in SECTIONS:
        items = mapping.get(section) or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise SourceError(f"{path}: CSV mapping section {section!r} must be a list of mappings")
        for n, item in enumerate(items):
            _check_item(path, section, n, item)
    return mapping


_REQUIRED = {
    "events": ("src", "dst", "event_type", "ts"),
    "entities": ("type", "key"),
    "relations": ("src", "dst", "relation"),
}


def _check_item(path: Path, section: str, n: int, item: dict) -> None:
    missing = [k for k in _REQUIRED[section] if k not in item]
    if missing:
        raise SourceError(f"{path}: {section}[{n}] lacks {', '.join(missing)}")
    for end in ("src", "dst"):
        if end in item and not (isinstance(item[end], dict) and {"type", "column"} <= set(item[end])):
            raise SourceError(f"{path}: {section}[{n}].{end} needs 'type' and 'column'")
    kind = item.get("event_type")
    if section == "events" and not (isinstance(kind, dict) and ("constant" in kind or "column" in kind)):
        raise SourceError(f"{path}: events[{n}].event_type needs 'constant' or 'column'")


def _columns_of(item: dict) -> list[str]:
    """The input columns one mapping section reads."""
    cols = [item[e]["column"] for e in ("src", "dst") if e in item]
    for key in ("event_type", "ts", "value", "first_seen", "valid_from", "image"):
        if isinstance(item.get(key), dict) and "column" in item[key]:
            cols.append(item[key]["column"])
    if "key" in item:
        cols.append(item["key"])
    cols += list(item.get("text") or []) + list(item.get("attrs") or [])
    return [str(c) for c in cols]


def _validate(table: Table, uses: list[tuple[str, int, dict]], folder: Path) -> None:
    """Apply every section's row checks to ``table`` (read from a file in ``folder``).

    Parsed values go to ``_<section><n>_*`` columns: ``_ts``, ``_value``, ``_image``.
    """
    table.reject_blank_lines()
    for section, n, item in uses:
        tag = f"_{section}{n}"
        if section == "events":
            table.require([item["src"]["column"], item["dst"]["column"]])
            kind = item["event_type"]
            if "column" in kind:
                table.require([kind["column"]])
                if kind.get("allowed"):
                    table.choice(kind["column"], [str(a) for a in kind["allowed"]])
            _time(table, item["ts"], tag + "_ts")
            if isinstance(item.get("value"), dict):
                table.number(item["value"]["column"], tag + "_value")
        elif section == "entities":
            table.require([item["key"]])
            if isinstance(item.get("first_seen"), dict):
                _time(table, item["first_seen"], tag + "_ts")
            if isinstance(item.get("image"), dict):
                _image(table, item["image"], folder, tag + "_image")
        else:
            table.require([item["src"]["column"]])
            if isinstance(item.get("valid_from"), dict):
                _time(table, item["valid_from"], tag + "_ts")
    table.duplicates()


def _time(table: Table, spec: dict, out: str) -> None:
    if "constant" in spec:
        when = pd.Timestamp(spec["constant"])
        table.frame[out] = when.tz_localize("UTC") if when.tzinfo is None else when.tz_convert("UTC")
        return
    table.require([spec["column"]])
    table.timestamp(spec["column"], out, fmt=str(spec.get("format", TIME_FORMAT_DEFAULT)))


def _image(table: Table, spec: dict, folder: Path, out: str) -> None:
    """Resolve image names to absolute paths under ``folder / dir``; reject rows whose file is absent."""
    base = (folder / str(spec.get("dir", ""))).resolve()
    names = table.frame[spec["column"]].astype(str).str.strip()
    paths = pd.Series([str(base / n) if n else "" for n in names], index=table.frame.index)
    exists = np.array([bool(p) and Path(p).is_file() for p in paths])
    table.reject(~exists, f"image file not found under {base}:", quote=spec["column"])
    table.frame[out] = paths.loc[table.frame.index]


def _events(rows: pd.DataFrame, n: int, item: dict) -> pd.DataFrame:
    tag = f"_events{n}"
    kind = item["event_type"]
    value = rows[tag + "_value"].to_numpy() if isinstance(item.get("value"), dict) else 1.0
    return pd.DataFrame(
        {
            "src_type": str(item["src"]["type"]),
            "src_key": rows[item["src"]["column"]].astype(object).to_numpy(),
            "dst_type": str(item["dst"]["type"]),
            "dst_key": rows[item["dst"]["column"]].astype(object).to_numpy(),
            "event_type": rows[kind["column"]].astype(object).to_numpy() if "column" in kind else str(kind["constant"]),
            "ts": rows[tag + "_ts"].to_numpy(),
            "value": value,
        }
    )


def _entities(rows: pd.DataFrame, n: int, item: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    tag = f"_entities{n}"
    keys = rows[item["key"]].astype(object).to_numpy()
    first = rows[tag + "_ts"].to_numpy() if isinstance(item.get("first_seen"), dict) else pd.NaT
    attrs = json_records(rows[list(item["attrs"])]) if item.get("attrs") else None
    entities = pd.DataFrame({"entity_type": str(item["type"]), "source_key": keys, "first_seen": first, "attrs": attrs})
    text_cols = list(item.get("text") or [])
    text = None
    if text_cols:
        parts = rows[text_cols].astype(object).fillna("").astype(str)
        # A comprehension, not DataFrame.apply: apply on zero rows returns a frame, not a column.
        text = np.array([" | ".join(v.strip() for v in r if v.strip()) or None
                         for r in parts.itertuples(index=False, name=None)], dtype=object)
    image = rows[tag + "_image"].to_numpy() if isinstance(item.get("image"), dict) else None
    content = pd.DataFrame({"entity_type": str(item["type"]), "source_key": keys, "text": text, "image_uri": image})
    if text is None and image is None:
        content = content.iloc[0:0]
    return entities, content


def _relations(rows: pd.DataFrame, n: int, item: dict) -> pd.DataFrame:
    dst = rows[item["dst"]["column"]].astype(str).str.strip()
    same = (item["src"]["type"] == item["dst"]["type"]) & (rows[item["src"]["column"]].astype(str).str.strip() == dst)
    rows = rows[(dst != "") & ~same]
    since = rows[f"_relations{n}_ts"].to_numpy() if isinstance(item.get("valid_from"), dict) else pd.NaT
    return pd.DataFrame(
        {
            "src_type": str(item["src"]["type"]),
            "src_key": rows[item["src"]["column"]].astype(object).to_numpy(),
            "dst_type": str(item["dst"]["type"]),
            "dst_key": rows[item["dst"]["column"]].astype(object).str.strip().to_numpy(),
            "relation": str(item["relation"]),
            "valid_from": since,
        }
    )


def _default_valid_from(relations: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Fill missing ``valid_from`` with the src entity's first event time, else the batch's first event time."""
    since = pd.to_datetime(relations["valid_from"], utc=True)
    if not since.isna().any() or events.empty:
        return relations
    ends = pd.concat(
        [
            events[["src_type", "src_key", "ts"]].set_axis(["type", "key", "ts"], axis=1),
            events[["dst_type", "dst_key", "ts"]].set_axis(["type", "key", "ts"], axis=1),
        ]
    )
    first = ends.groupby(["type", "key"])["ts"].min()
    wanted = pd.MultiIndex.from_arrays([relations["src_type"], relations["src_key"]])
    fill = pd.to_datetime(pd.Series(first.reindex(wanted).to_numpy(), index=relations.index), utc=True)
    return relations.assign(valid_from=since.fillna(fill.fillna(events["ts"].min())))


def _by_file(mapping: dict, path: Path, folder: Path) -> dict[Path, list[tuple[str, int, dict]]]:
    """Input file → the (section, index, item) entries that read it."""
    uses: dict[Path, list[tuple[str, int, dict]]] = {}
    for section in SECTIONS:
        for n, item in enumerate(mapping.get(section) or []):
            if "file" in item:
                file = folder / str(item["file"])
            elif path.is_file():
                file = path
            else:
                raise SourceError(f"{path}: {section}[{n}] of the CSV mapping names no file and the path is a folder")
            uses.setdefault(file, []).append((section, n, item))
    return uses


def read(path: Path, settings: Settings) -> SourceBatch:
    """Read the CSV file or folder ``path`` through its YAML mapping (see the module docstring)."""
    if not path.exists():
        raise SourceError(f"{path}: CSV source not found")
    mapping_path = _mapping_path(path, settings)
    mapping = load_mapping(mapping_path)
    folder = path if path.is_dir() else path.parent
    sep = str(mapping.get("delimiter", ","))
    out: dict[str, list[pd.DataFrame]] = {"events": [], "entities": [], "content": [], "relations": []}
    tables = []
    by_file = _by_file(mapping, path, folder)
    for file, uses in by_file.items():
        columns = list(dict.fromkeys(c for _, _, item in uses for c in _columns_of(item)))
        table = read_table(file, columns, header=True, sep=sep, what="CSV input")
        _validate(table, uses, file.parent)
        tables.append(table)
        for section, n, item in uses:
            if section == "events":
                out["events"].append(_events(table.frame, n, item))
            elif section == "entities":
                entities, content = _entities(table.frame, n, item)
                out["entities"].append(entities)
                out["content"].append(content)
            else:
                out["relations"].append(_relations(table.frame, n, item))
    frames = {k: pd.concat(v, ignore_index=True) for k, v in out.items() if v}
    if "relations" in frames and "events" in frames:
        frames["relations"] = _default_valid_from(frames["relations"], frames["events"])
    return make_batch(SOURCE, path, list(by_file), tables, salt=mapping_path.read_text(encoding="utf-8"), **frames)
