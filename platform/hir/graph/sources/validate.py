"""Shared, vectorised validation of delimited input rows for every real-data adapter.

:func:`read_table` reads one delimited file (pyarrow, single-threaded so each row keeps its
physical line number) into a :class:`Table` of string columns. A row with the wrong number of
fields becomes a rejected row at once; a file that cannot be read at all (missing, empty, wrong
delimiter, no header, missing columns, not UTF-8) raises :class:`SourceError` with one line that
names the file.

The :class:`Table` methods then check rows column by column — required fields, id patterns,
numbers, unix or ISO timestamps inside a plausible range, event types from a known set, duplicate
rows — and move each failing row to ``Table.rejected`` with location ``"file:line"``, the raw text
and the reason; parsed values go to new columns of ``Table.frame``. What is left in ``frame`` is
accepted. :func:`make_batch` turns tables and canonical frames into a checked :class:`SourceBatch`.
"""

from __future__ import annotations

import csv
import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from hir.errors import SourceError
from hir.graph.sources.base import (
    REJECTED_COLUMNS,
    SourceBatch,
    empty_frame,
    fingerprint_files,
    require_file,
)

# Timestamps outside [PLAUSIBLE_START, PLAUSIBLE_END) are rejected unless an adapter is stricter.
PLAUSIBLE_START = pd.Timestamp("1990-01-01", tz="UTC")
PLAUSIBLE_END = pd.Timestamp("2100-01-01", tz="UTC")
_OTHER_DELIMITERS = (",", ";", "\t", "|")
_STRING = pd.StringDtype("pyarrow")
LINE = "_line"
FILE = "_file"


def _first_line(path: Path) -> str:
    """The first line of ``path``; a ``.gz`` file is read decompressed, as Arrow's CSV reader reads it."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = fh.readline(1 << 20)
    return raw.decode("utf-8", errors="replace").lstrip("\ufeff").rstrip("\r\n")


def _check_delimiter(path: Path, first: str, sep: str, expected_fields: int) -> None:
    """Raise if the first line is one field that holds another delimiter instead of ``sep``."""
    if expected_fields < 2 or sep in first:
        return
    for other in _OTHER_DELIMITERS:
        if other != sep and other in first:
            raise SourceError(
                f"{path}: wrong delimiter: expected {sep!r}-separated fields, the first line is separated by {other!r}"
            )
    raise SourceError(f"{path}: expected {expected_fields} {sep!r}-separated fields, the first line has 1")


def _split_first(path: Path, first: str, sep: str) -> list[str]:
    """The fields of the first line; one the csv module cannot split (a stray carriage return, a
    field over its size limit) is a one-line :class:`SourceError` naming the file."""
    try:
        return next(csv.reader([first], delimiter=sep), [])
    except csv.Error as exc:
        raise SourceError(f"{path}: cannot split the first line into {sep!r}-separated fields ({exc})") from None


def _header_names(path: Path, first: str, sep: str, columns: Sequence[str]) -> list[str]:
    """The header's column names; raise when the header is absent or lacks any of ``columns``."""
    if not first.strip():
        raise SourceError(f"{path}: no header line (the first line is blank); expected columns {', '.join(columns)}")
    _check_delimiter(path, first, sep, len(columns))
    names = [name.strip() for name in _split_first(path, first, sep)]
    missing = [c for c in columns if c not in names]
    if len(missing) == len(columns) > 1:
        raise SourceError(f"{path}: no header line with columns {', '.join(columns)} (first line: {first[:80]!r})")
    if missing:
        raise SourceError(f"{path}: missing columns {', '.join(missing)} (header has {', '.join(names)})")
    return names


@dataclass
class Table:
    """The rows of one or more files of the same layout, under validation.

    Attributes:
        columns: the input columns (strings in ``frame``); ``raw`` of a rejected row joins them.
        sep: the delimiter, used to rebuild a rejected row's raw text.
        frame: accepted-so-far rows: the input columns, ``_file``, ``_line`` and parsed columns.
        rejected: ``location, raw, reason`` of every row rejected so far.
        rows_read: data rows seen in the files.
    """

    columns: list[str]
    sep: str
    frame: pd.DataFrame
    rejected: list[pd.DataFrame] = field(default_factory=list)
    rows_read: int = 0

    @property
    def rows_accepted(self) -> int:
        return len(self.frame)

    def rejected_frame(self) -> pd.DataFrame:
        return concat_rejected(self.rejected)

    def reject(self, mask: pd.Series | np.ndarray, reason: str | pd.Series, quote: str | None = None, suffix: str = "") -> None:
        """Move the rows where ``mask`` holds to ``rejected``.

        Args:
            mask: one flag per row of ``frame``.
            reason: the reason, or per-row reasons indexed like the rejected rows.
            quote: a column whose value is quoted after ``reason`` ("malformed user 'x'").
            suffix: text after the quoted value.
        """
        mask = np.asarray(mask, dtype=bool)
        if not mask.any():
            return
        bad = self.frame[mask]
        raw = bad[self.columns[0]].astype(str)
        for column in self.columns[1:]:
            raw = raw + self.sep + bad[column].astype(str)
        if isinstance(reason, pd.Series):
            reason = reason.loc[bad.index].astype(str).to_numpy()
        elif quote is not None:
            reason = (reason + " '" + bad[quote].astype(str).str.slice(0, 60) + "'" + suffix).to_numpy()
        self.rejected.append(
            pd.DataFrame({"location": _locations(bad), "raw": raw.to_numpy(), "reason": reason})
        )
        self.frame = self.frame[~mask]

    def reject_blank_lines(self) -> None:
        """Reject rows whose every field is empty (blank lines)."""
        blank = np.ones(len(self.frame), dtype=bool)
        for column in self.columns:
            blank &= (self.frame[column].str.strip() == "").to_numpy()
        before = len(self.rejected)
        self.reject(blank, "empty line")
        if len(self.rejected) > before:
            self.rejected[-1]["raw"] = ""

    def require(self, columns: Iterable[str]) -> None:
        """Reject rows with an empty value in any of ``columns`` ("missing field C")."""
        for column in columns:
            self.reject(self.frame[column].str.strip() == "", f"missing field {column}")

    def match(self, column: str, pattern: str, what: str) -> None:
        """Reject rows whose ``column`` does not fully match the regular expression ``pattern``."""
        ok = self.frame[column].str.fullmatch(pattern).fillna(False).astype(bool)
        self.reject(~ok, "malformed " + what, quote=column)

    def ids(self, columns: Iterable[str]) -> None:
        """Require ``columns`` to hold non-negative integer ids (digits only)."""
        for column in columns:
            self.match(column, r"\d+", column)

    def number(self, column: str, out: str, low: float = -np.inf, high: float = np.inf) -> None:
        """Parse ``column`` as a float into ``out``; reject unparsable values and those outside [low, high]."""
        values = pd.to_numeric(self.frame[column].astype(object), errors="coerce").astype(float)
        self.reject(~np.isfinite(values), "malformed " + column, quote=column)
        values = values.loc[self.frame.index]
        self.reject((values < low) | (values > high), f"{column} outside [{low:g}, {high:g}]:", quote=column)
        self.frame = self.frame.assign(**{out: values.loc[self.frame.index]})

    def choice(self, column: str, allowed: Sequence[str], what: str = "event type") -> None:
        """Reject rows whose ``column`` is not one of ``allowed`` ("unknown event type 'x' ...")."""
        bad = ~self.frame[column].isin(list(allowed))
        self.reject(bad, f"unknown {what}", quote=column, suffix=f" (expected one of {', '.join(allowed)})")

    def timestamp(
        self,
        column: str,
        out: str,
        fmt: str = "unix_s",
        start: pd.Timestamp = PLAUSIBLE_START,
        end: pd.Timestamp = PLAUSIBLE_END,
    ) -> None:
        """Parse ``column`` into the UTC timestamp column ``out`` and keep rows with ``start <= ts < end``.

        ``fmt``: ``"unix_s"`` / ``"unix_ms"`` (integer seconds / milliseconds since 1970, UTC),
        ``"iso"`` (ISO 8601; no zone means UTC) or a ``strftime`` pattern (read as UTC).
        Values outside the range are rejected before conversion, so huge numbers cannot overflow.
        """
        if fmt in ("unix_s", "unix_ms"):
            scale = 1 if fmt == "unix_s" else 1000
            self.match(column, r"[+-]?\d{1,18}", f"timestamp ({fmt})")
            ticks = self.frame[column].astype("int64[pyarrow]").astype("int64")
            self._keep_range(column, (ticks >= start.timestamp() * scale) & (ticks < end.timestamp() * scale), start, end)
            parsed = pd.to_datetime(ticks.loc[self.frame.index], unit="s" if scale == 1 else "ms", utc=True)
        else:
            parsed = _parse_text_times(self.frame[column], fmt)
            self.reject(parsed.isna(), f"unparsable timestamp ({fmt})", quote=column)
            parsed = parsed.loc[self.frame.index]
            self._keep_range(column, (parsed >= start) & (parsed < end), start, end)
            parsed = parsed.loc[self.frame.index]
        self.frame = self.frame.assign(**{out: parsed.astype("datetime64[ns, UTC]")})

    def _keep_range(self, column: str, inside: pd.Series, start: pd.Timestamp, end: pd.Timestamp) -> None:
        self.reject(~inside, f"timestamp outside [{start.isoformat()}, {end.isoformat()}):", quote=column)

    def duplicates(self, columns: Sequence[str] | None = None, what: str = "row") -> None:
        """Reject every repeat of an earlier row with equal ``columns`` (default: all input columns)."""
        columns = list(columns or self.columns)
        repeat = self.frame.duplicated(columns, keep="first")
        if not repeat.any():
            return
        firsts = self.frame[~repeat & self.frame.duplicated(columns, keep=False)]
        firsts = firsts[columns + [FILE, LINE]].rename(columns={FILE: "_first_file", LINE: "_first_line"})
        joined = self.frame.loc[repeat, columns].merge(firsts, on=columns, how="left")
        reason = f"duplicate {what} of " + joined["_first_file"].astype(str) + ":" + joined["_first_line"].astype(str)
        self.reject(repeat, pd.Series(reason.to_numpy(), index=self.frame.index[repeat]))


def _locations(frame: pd.DataFrame) -> np.ndarray:
    return (frame[FILE].astype(str) + ":" + frame[LINE].astype(str)).to_numpy()


def _parse_text_times(values: pd.Series, fmt: str) -> pd.Series:
    """ISO 8601 (``fmt="iso"``) or ``strftime`` text to UTC; unparsable values become NaT."""
    text = values.astype(object)
    if fmt == "iso":
        return pd.to_datetime(text, utc=True, errors="coerce", format="ISO8601")
    return pd.to_datetime(text, utc=True, errors="coerce", format=fmt)


def concat_rejected(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return empty_frame(REJECTED_COLUMNS)
    return pd.concat(frames, ignore_index=True)[REJECTED_COLUMNS].astype(object)


def read_table(
    path: Path,
    columns: Sequence[str],
    *,
    header: bool,
    sep: str = ",",
    what: str = "file",
    label: str | None = None,
) -> Table:
    """Read the delimited file ``path`` into a :class:`Table` of its ``columns`` as strings.

    Args:
        path: the file.
        columns: for ``header=True`` the columns to read (the header must hold them all; other
            columns are ignored); for ``header=False`` the names of the file's fields, in order.
        header: whether the first line names the columns.
        sep: the field delimiter.
        what: what the file is, for error messages ("ratings file").
        label: the file's name in row locations (default: the file name).
    """
    require_file(path, what)
    first = _first_line(path)
    if header:
        names = _header_names(path, first, sep, columns)
    else:
        names = list(columns)
        _check_delimiter(path, first, sep, len(names))
        found = len(_split_first(path, first, sep))
        if found != len(names):
            raise SourceError(
                f"{path}: expected {len(names)} {sep!r}-separated fields ({', '.join(names)}), the first line has {found}"
            )
    invalid: list[pacsv.InvalidRow] = []

    def on_invalid(row: pacsv.InvalidRow) -> str:
        invalid.append(row)
        return "skip"

    try:
        data = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(use_threads=False, column_names=names, skip_rows=1 if header else 0),
            parse_options=pacsv.ParseOptions(delimiter=sep, invalid_row_handler=on_invalid, ignore_empty_lines=False),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in names},
                include_columns=list(columns),
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SourceError(f"{path}: cannot read as {sep!r}-delimited text: {message}") from None
    return _table_from_arrow(data, invalid, list(columns), sep, label or path.name, 2 if header else 1)


def _table_from_arrow(
    data: pa.Table, invalid: list[pacsv.InvalidRow], columns: list[str], sep: str, label: str, first_line: int
) -> Table:
    """Number the good rows by physical line (those not taken by invalid rows) and reject the invalid ones."""
    total = data.num_rows + len(invalid)
    good = np.ones(total, dtype=bool)
    good[np.array([row.number for row in invalid], dtype=np.int64) - first_line] = False
    frame = data.to_pandas(types_mapper={pa.string(): _STRING}.get)
    frame[FILE] = _labels(label, len(frame))
    frame[LINE] = np.arange(first_line, first_line + total, dtype=np.int64)[good]
    table = Table(columns=columns, sep=sep, frame=frame, rows_read=total)
    if invalid:
        table.rejected.append(
            pd.DataFrame(
                {
                    "location": [f"{label}:{row.number}" for row in invalid],
                    "raw": [row.text for row in invalid],
                    "reason": [
                        f"expected {row.expected_columns} fields, found {row.actual_columns}" for row in invalid
                    ],
                }
            )
        )
    return table


def read_lines(path: Path, what: str) -> Table:
    """Read the UTF-8 text file ``path`` into a :class:`Table` with one column, ``line``, per line."""
    require_file(path, what)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: {what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = text.lstrip("\ufeff").split("\n")
    if lines[-1] == "":
        lines.pop()
    frame = pd.DataFrame({"line": pd.Series(lines, dtype=_STRING).str.rstrip("\r")})
    frame[FILE] = _labels(path.name, len(frame))
    frame[LINE] = np.arange(1, len(frame) + 1, dtype=np.int64)
    return Table(columns=["line"], sep=" ", frame=frame, rows_read=len(frame))


def _labels(label: str, n: int) -> pd.Categorical:
    """``label`` repeated ``n`` times, as a one-category categorical."""
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[label])


def concat_tables(tables: Sequence[Table]) -> Table:
    """One table from several of the same columns (e.g. the CSV files of one folder)."""
    first = tables[0]
    frame = pd.concat([t.frame for t in tables], ignore_index=True)
    frame[FILE] = frame[FILE].astype(str).astype("category")
    rejected = [r for t in tables for r in t.rejected]
    return Table(first.columns, first.sep, frame, rejected, sum(t.rows_read for t in tables))


def json_records(frame: pd.DataFrame) -> list[str | None]:
    """One JSON object text per row of ``frame`` (empty strings and missing values become null)."""
    if frame.empty:
        return [None] * len(frame)
    clean = frame.astype(object).where(frame.notna() & (frame.astype(str) != ""), None)
    return [json.dumps(r, ensure_ascii=False, sort_keys=True) for r in clean.to_dict(orient="records")]


def make_batch(
    source: str,
    location: Path,
    files: Sequence[Path],
    tables: Sequence[Table],
    salt: str = "",
    **frames: pd.DataFrame,
) -> SourceBatch:
    """A :class:`SourceBatch` whose counts come from ``tables``.

    Args:
        source: the adapter's kind.
        location: the path that was read.
        files: every input file, fingerprinted in this order (with ``salt``).
        tables: the validated tables; rows read / accepted / rejected are their sums.
        salt: what else decides the output besides the files' bytes (e.g. a mapping's text).
        frames: ``entities``, ``events``, ``relations``, ``content`` (canonical columns).
    """
    rejected = concat_rejected([t.rejected_frame() for t in tables])
    batch = SourceBatch(
        source=source,
        location=str(location),
        fingerprint=fingerprint_files(files, salt=f"{source}\0{salt}"),
        rows_read=sum(t.rows_read for t in tables),
        rows_accepted=sum(t.rows_accepted for t in tables),
        rejected=rejected,
        **frames,
    )
    batch.check_accounting()
    return batch


def first_times(keys: pd.Series, times: pd.Series) -> pd.Series:
    """The earliest time per key: ``min(times)`` grouped by ``keys``."""
    return pd.Series(times.to_numpy(), index=keys.to_numpy()).groupby(level=0).min()


def csv_files(path: Path, what: str) -> list[Path]:
    """``path`` itself, or the ``*.csv`` files of the folder ``path`` (sorted); raise if there are none."""
    if path.is_dir():
        files = sorted(p for p in path.glob("*.csv") if p.is_file())
        if not files:
            raise SourceError(f"{path}: no *.csv files in this folder ({what})")
        return files
    return [require_file(path, what)]
