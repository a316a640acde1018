"""The contract between source adapters and the warehouse.

An adapter reads its input files and returns a :class:`SourceBatch`: canonical records keyed by
``(entity_type, source_key)`` (the warehouse assigns dense ids), every rejected input row with its
location and reason, and the count of input rows read, so that ``accepted + rejected = read``.

A user mistake the adapter cannot turn into rejected rows (missing file, empty file, wrong
delimiter, unknown source kind) raises :class:`SourceError` with one line naming the file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import pandas as pd

from hir.errors import SourceError

ENTITY_COLUMNS = ["entity_type", "source_key", "first_seen", "attrs"]
EVENT_COLUMNS = ["src_type", "src_key", "dst_type", "dst_key", "event_type", "ts", "value"]
RELATION_COLUMNS = ["src_type", "src_key", "dst_type", "dst_key", "relation", "valid_from"]
CONTENT_COLUMNS = ["entity_type", "source_key", "text", "image_uri"]
REJECTED_COLUMNS = ["location", "raw", "reason"]



def empty_frame(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})


@dataclass
class SourceBatch:
    """Canonical records from one read of a source.

    Attributes:
        source: the adapter's kind, e.g. ``"movielens"``.
        location: what was read (file or folder), for messages and the ingest ledger.
        fingerprint: sha256 over the input bytes; a batch already loaded is skipped.
        rows_read: input rows seen (data rows of every file read).
        rows_accepted: input rows that produced canonical records.
        entities: ``entity_type, source_key, first_seen (UTC timestamp or NaT), attrs (JSON text or None)``.
        events: ``src_type, src_key, dst_type, dst_key, event_type, ts (UTC), value``.
        relations: ``src_type, src_key, dst_type, dst_key, relation, valid_from (UTC)``.
        content: ``entity_type, source_key, text, image_uri``.
        rejected: ``location, raw, reason`` — one row per rejected input row.
        extra_tables: more tables keyed by ``entity_type, source_key`` (e.g. ``planted_truth``);
            the warehouse replaces the key columns by ``entity_id``.
        whole_world: the batch is a complete generated world (the synthetic ecosystem): a data
            home holds one, since another one's keys would collide with it.
    """

    source: str
    location: str
    fingerprint: str
    rows_read: int
    rows_accepted: int
    entities: pd.DataFrame = field(default_factory=lambda: empty_frame(ENTITY_COLUMNS))
    events: pd.DataFrame = field(default_factory=lambda: empty_frame(EVENT_COLUMNS))
    relations: pd.DataFrame = field(default_factory=lambda: empty_frame(RELATION_COLUMNS))
    content: pd.DataFrame = field(default_factory=lambda: empty_frame(CONTENT_COLUMNS))
    rejected: pd.DataFrame = field(default_factory=lambda: empty_frame(REJECTED_COLUMNS))
    extra_tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    whole_world: bool = False

    @property
    def rows_rejected(self) -> int:
        return len(self.rejected)

    def check_accounting(self) -> None:
        if self.rows_accepted + self.rows_rejected != self.rows_read:
            raise AssertionError(
                f"{self.source} {self.location}: accepted {self.rows_accepted} + rejected "
                f"{self.rows_rejected} != read {self.rows_read}"
            )


def fingerprint_files(paths: Iterable[Path], salt: str = "") -> str:
    """sha256 over the files' bytes (in the given order) and ``salt``."""
    digest = hashlib.sha256(salt.encode())
    for path in paths:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def require_file(path: Path, what: str) -> Path:
    """Return ``path`` if it is a non-empty file, else raise a one-line :class:`SourceError`."""
    if not path.exists():
        raise SourceError(f"{path}: {what} not found")
    if not path.is_file():
        raise SourceError(f"{path}: {what} is not a file")
    if path.stat().st_size == 0:
        raise SourceError(f"{path}: {what} is empty")
    return path
