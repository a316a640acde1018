"""8 concurrent clients read online features for ~10 s while a second partition is materialised."""

import numpy as np
import pytest
from hir.cli.bench.faults import _feature_embeddings, online_load
from hir.partitions import cutoff_of
from hir.serving.feast_store import FeastStore

HOSTILE_KEY = "'; DROP TABLE events; --"


@pytest.mark.slow
def test_reads_during_materialisation_are_old_or_new_never_errors(data_home):
    stats = online_load(FeastStore(data_home=str(data_home)), clients=8, seconds=10.0, seed=0)
    assert stats["lookups"] > 0
    assert stats["lookup_errors"] == 0
    assert stats["mixed_answers"] == 0
    assert stats["new_seen"] > 0  # the last reads come after the materialisation
    # an SQL-looking key is just a key: it reads back its own new vector
    new = _feature_embeddings(200, 16, cutoff_of("2026-01-11"), "v1", seed=1).to_pandas()
    want = new.loc[new["source_key"] == HOSTILE_KEY, "embedding"].iloc[0]
    got = FeastStore(data_home=str(data_home)).online("ad", [HOSTILE_KEY], features=["hir_embedding", "model_version"])
    assert got["model_version"] == ["v1"]
    assert np.array_equal(np.asarray(got["hir_embedding"][0], np.float32), np.asarray(want, np.float32))
