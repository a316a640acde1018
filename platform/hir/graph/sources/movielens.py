"""MovieLens (``ml-latest-small`` layout): ``ratings.csv``, ``tags.csv``, ``movies.csv`` in a folder.

* ``ratings.csv`` (``userId,movieId,rating,timestamp``, required): events ``user → movie`` of type
  ``rating`` with ``value`` = the rating (0.5 .. 5 stars).
* ``tags.csv`` (``userId,movieId,tag,timestamp``, optional): events ``user → tag`` of type ``tag``
  (``value`` 1.0); ``tag`` entities keyed by the tag lower-cased with spaces collapsed, whose
  content text is that key; relations ``movie → tag`` (``has_tag``) valid from the first time
  the tag was put on the movie.
* ``movies.csv`` (``movieId,title,genres``, required): ``movie`` entities with content text
  ``"title | genre, genre"``; ``genre`` entities (content text = the genre) and relations
  ``movie → genre`` (``has_genre``); ``(no genres listed)`` gives no genre. The file has no
  times, so a movie (and its genre relations) is known from its first rating or tag, or, when
  it has none, from the first timestamp of the whole input.

``links.csv`` is ignored. Timestamps are unix seconds and must lie in [1995-01-01, 2100-01-01).
Rejected rows: wrong field counts, empty or non-integer ids, unparsable or out-of-range ratings
and timestamps, repeated rows, a ``movieId`` listed twice in ``movies.csv``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hir.errors import SourceError
from hir.graph.sources.base import SourceBatch
from hir.graph.sources.validate import (
    PLAUSIBLE_END,
    Table,
    first_times,
    make_batch,
    read_table,
)
from hir.settings import Settings

SOURCE = "movielens"
ITEM = "movie"
START = pd.Timestamp("1995-01-01", tz="UTC")
NO_GENRES = "(no genres listed)"


def _ratings(path: Path) -> Table:
    table = read_table(path, ["userId", "movieId", "rating", "timestamp"], header=True, what="MovieLens ratings file")
    table.reject_blank_lines()
    table.require(table.columns)
    table.ids(["userId", "movieId"])
    table.number("rating", "value", 0.5, 5.0)
    table.timestamp("timestamp", "ts", start=START, end=PLAUSIBLE_END)
    table.duplicates()
    return table


def _tags(path: Path) -> Table:
    table = read_table(path, ["userId", "movieId", "tag", "timestamp"], header=True, what="MovieLens tags file")
    table.reject_blank_lines()
    table.require(table.columns)
    table.ids(["userId", "movieId"])
    table.timestamp("timestamp", "ts", start=START, end=PLAUSIBLE_END)
    table.frame = table.frame.assign(key=table.frame["tag"].str.lower().str.split().str.join(" ").astype(object))
    table.duplicates(["userId", "movieId", "key", "timestamp"], what="tag")
    return table


def _movies(path: Path) -> Table:
    table = read_table(path, ["movieId", "title", "genres"], header=True, what="MovieLens movies file")
    table.reject_blank_lines()
    table.require(["movieId", "title"])
    table.ids(["movieId"])
    table.duplicates(["movieId"], what="movieId")
    return table


def _events(ratings: pd.DataFrame, tags: pd.DataFrame) -> pd.DataFrame:
    rated = pd.DataFrame(
        {
            "src_type": "user",
            "src_key": ratings["userId"].astype(object),
            "dst_type": ITEM,
            "dst_key": ratings["movieId"].astype(object),
            "event_type": "rating",
            "ts": ratings["ts"],
            "value": ratings["value"],
        }
    )
    tagged = pd.DataFrame(
        {
            "src_type": "user",
            "src_key": tags["userId"].astype(object),
            "dst_type": "tag",
            "dst_key": tags["key"],
            "event_type": "tag",
            "ts": tags["ts"],
            "value": 1.0,
        }
    )
    return pd.concat([rated, tagged], ignore_index=True)


def _relation(src_type: str, src: pd.Series, dst_type: str, dst: pd.Series, relation: str, since: pd.Series) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "src_type": src_type,
            "src_key": src.to_numpy(),
            "dst_type": dst_type,
            "dst_key": dst.to_numpy(),
            "relation": relation,
            "valid_from": since.to_numpy(),
        }
    )


def _catalogue(movies: pd.DataFrame, events: pd.DataFrame, tags: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Movie and genre entities, content and relations; a movie is known from its first event."""
    item_events = pd.concat(
        [events.loc[events["dst_type"] == ITEM, ["dst_key", "ts"]], tags[["movieId", "ts"]].set_axis(["dst_key", "ts"], axis=1)]
    )
    first = first_times(item_events["dst_key"].astype(str), item_events["ts"])
    start = events["ts"].min() if len(events) else pd.NaT
    movie_ids = movies["movieId"].astype(str)
    since = movie_ids.map(first).fillna(start).astype("datetime64[ns, UTC]")
    genres = movies["genres"].astype(str).str.split("|")
    genre_text = genres.map(lambda gs: ", ".join(g for g in gs if g and g != NO_GENRES))
    exploded = pd.DataFrame({"movie": movie_ids, "genre": genres, "since": since}).explode("genre")
    exploded = exploded[(exploded["genre"].str.len() > 0) & (exploded["genre"] != NO_GENRES)]
    entities = pd.DataFrame({"entity_type": ITEM, "source_key": movie_ids.to_numpy(), "first_seen": since.to_numpy(), "attrs": None})
    tag_keys = tags["key"].drop_duplicates()
    content = pd.concat(
        [
            pd.DataFrame({"entity_type": ITEM, "source_key": movie_ids.to_numpy(),
                          "text": (movies["title"].astype(str) + " | " + genre_text).str.rstrip(" |").to_numpy()}),
            pd.DataFrame({"entity_type": "genre", "source_key": exploded["genre"].drop_duplicates().to_numpy()}),
            pd.DataFrame({"entity_type": "tag", "source_key": tag_keys.to_numpy()}),
        ],
        ignore_index=True,
    )
    content["text"] = content["text"].fillna(content["source_key"])
    content["image_uri"] = None
    tag_since = tags.groupby(["movieId", "key"], observed=True)["ts"].min().reset_index()
    relations = pd.concat(
        [
            _relation(ITEM, exploded["movie"], "genre", exploded["genre"], "has_genre", exploded["since"]),
            _relation(ITEM, tag_since["movieId"].astype(object), "tag", tag_since["key"], "has_tag", tag_since["ts"]),
        ],
        ignore_index=True,
    )
    return {"entities": entities, "content": content, "relations": relations}


def read(path: Path, settings: Settings) -> SourceBatch:
    """Read the MovieLens folder ``path``; ``settings`` is unused (no knobs)."""
    if not path.is_dir():
        raise SourceError(f"{path}: expected the MovieLens folder holding ratings.csv, movies.csv and tags.csv")
    ratings = _ratings(path / "ratings.csv")
    movies = _movies(path / "movies.csv")
    tables = [ratings, movies]
    files = [path / "ratings.csv", path / "movies.csv"]
    tag_rows = pd.DataFrame({c: pd.Series(dtype=object) for c in ("userId", "movieId", "key")}).assign(
        ts=pd.Series(dtype="datetime64[ns, UTC]")
    )
    if (path / "tags.csv").exists():
        tags = _tags(path / "tags.csv")
        tables.append(tags)
        files.append(path / "tags.csv")
        tag_rows = tags.frame
    events = _events(ratings.frame, tag_rows)
    return make_batch(SOURCE, path, files, tables, events=events, **_catalogue(movies.frame, events, tag_rows))
