"""movielens: exact counts on ml-latest-small, bad rows, missing files, idempotent loading, the CLI's one-line error."""

import shutil

import pandas as pd
import pytest
from conftest import shared_data
from hir.errors import SourceError
from hir.graph.sources import read_source
from hir.graph.warehouse import connect, load_batch, table_counts
from hir.settings import Settings

MOVIES = 'movieId,title,genres\n1,Toy Story (1995),Adventure|Animation\n2,"Heat, The (1995)",(no genres listed)\n'
RATINGS = "userId,movieId,rating,timestamp\n1,1,4.0,964982703\n1,2,3.5,964981247\n2,1,5.0,964982224\n"
TAGS = "userId,movieId,tag,timestamp\n2,1,Pixar,1445714994\n3,1,pixar ,1445715000\n"


def _read(path):
    return read_source("movielens", path, Settings.from_mapping({}))


def _folder(tmp_path, ratings=RATINGS, movies=MOVIES, tags=TAGS):
    folder = tmp_path / "ml"
    folder.mkdir()
    for name, text in (("ratings.csv", ratings), ("movies.csv", movies), ("tags.csv", tags)):
        if text is not None:
            (folder / name).write_text(text)
    return folder


def test_real_ml_latest_small_counts():
    batch = _read(shared_data("movielens_latest_small"))
    assert batch.rows_read == 100_836 + 3_683 + 9_742
    assert batch.rows_accepted == batch.rows_read and len(batch.rejected) == 0
    counts = batch.events["event_type"].value_counts().to_dict()
    assert counts == {"rating": 100_836, "tag": 3_683}
    ratings = batch.events[batch.events["event_type"] == "rating"]
    assert ratings["src_key"].nunique() == 610 and ratings["dst_key"].nunique() == 9_724
    assert ratings["value"].between(0.5, 5).all()
    assert len(batch.entities) == 9_742
    types = batch.content["entity_type"].value_counts().to_dict()
    assert types == {"movie": 9_742, "tag": 1_475, "genre": 19}
    text = batch.content.set_index("source_key").loc["1", "text"]
    assert text == "Toy Story (1995) | Adventure, Animation, Children, Comedy, Fantasy"


def test_catalogue_tags_and_genres(tmp_path):
    batch = _read(_folder(tmp_path))
    assert batch.rows_read == batch.rows_accepted == 7
    content = batch.content.set_index(["entity_type", "source_key"])["text"]
    assert content[("movie", "2")] == "Heat, The (1995)"
    assert content[("tag", "pixar")] == "pixar"
    rel = batch.relations
    assert set(zip(rel["relation"], rel["src_key"], rel["dst_key"])) == {
        ("has_genre", "1", "Adventure"), ("has_genre", "1", "Animation"), ("has_tag", "1", "pixar"),
    }
    tag_rel = rel[rel["relation"] == "has_tag"].iloc[0]
    assert tag_rel["valid_from"] == pd.Timestamp(1445714994, unit="s", tz="UTC")
    genre_rel = rel[rel["relation"] == "has_genre"].iloc[0]
    assert genre_rel["valid_from"] == pd.Timestamp(964982224, unit="s", tz="UTC")  # the movie's first rating


def test_bad_rows_are_rejected_with_reasons(tmp_path):
    ratings = RATINGS + "1,3,7.0,964982703\n1,3,four,964982703\n1,3,4.0,12\n,3,4.0,964982703\n1,1,4.0,964982703\n1,3,4.0\n"
    movies = MOVIES + "1,Toy Story again (1995),Comedy\n"
    batch = _read(_folder(tmp_path, ratings=ratings, movies=movies))
    reasons = dict(zip(batch.rejected["location"], batch.rejected["reason"]))
    assert reasons == {
        "ratings.csv:5": "rating outside [0.5, 5]: '7.0'",
        "ratings.csv:6": "malformed rating 'four'",
        "ratings.csv:7": "timestamp outside [1995-01-01T00:00:00+00:00, 2100-01-01T00:00:00+00:00): '12'",
        "ratings.csv:8": "missing field userId",
        "ratings.csv:9": "duplicate row of ratings.csv:2",
        "ratings.csv:10": "expected 4 fields, found 3",
        "movies.csv:4": "duplicate movieId of movies.csv:2",
    }
    assert batch.rows_accepted + len(batch.rejected) == batch.rows_read == 14


def test_missing_and_broken_files_raise_one_line(tmp_path):
    with pytest.raises(SourceError) as err:
        _read(_folder(tmp_path, ratings=None))
    assert str(err.value) == f"{tmp_path / 'ml' / 'ratings.csv'}: MovieLens ratings file not found"
    shutil.rmtree(tmp_path / "ml")
    with pytest.raises(SourceError) as err:
        _read(_folder(tmp_path, ratings=RATINGS.replace(",", ";")))
    assert str(err.value).endswith("ratings.csv: wrong delimiter: expected ','-separated fields, the first line is separated by ';'")
    shutil.rmtree(tmp_path / "ml")
    with pytest.raises(SourceError, match=r"movies\.csv: missing columns genres \(header has movieId, title\)$"):
        _read(_folder(tmp_path, movies="movieId,title\n1,Toy Story\n"))
    shutil.rmtree(tmp_path / "ml")
    with pytest.raises(SourceError, match=r"tags\.csv: MovieLens tags file is empty$"):
        _read(_folder(tmp_path, tags=""))
    with pytest.raises(SourceError, match="expected the MovieLens folder"):
        _read(tmp_path / "ml" / "ratings.csv")


def test_loading_the_same_folder_twice_adds_nothing(tmp_path):
    folder = _folder(tmp_path)
    with connect(tmp_path / "w.duckdb") as con:
        load_batch(con, _read(folder))
        counts = table_counts(con)
        assert load_batch(con, _read(folder)).skipped
        assert table_counts(con) == counts
    assert counts == {"entities": 8, "events": 5, "relations": 3, "content": 5, "rejected_rows": 0}


@pytest.mark.slow
def test_cli_missing_file_exits_2_with_one_line(tmp_path, data_home, monkeypatch, capsys):
    from hir.cli.main import main

    folder = _folder(tmp_path, ratings=None)
    monkeypatch.setenv("HIR_SOURCE", "movielens")
    monkeypatch.setenv("HIR_SOURCE_PATH", str(folder))
    code = main(["run", "--source", "movielens", "--path", str(folder), "--ingest-only"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"hir run: {folder / 'ratings.csv'}: MovieLens ratings file not found\n" in err
    assert "Traceback" not in err
