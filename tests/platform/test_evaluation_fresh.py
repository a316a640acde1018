"""Which embeddings score a test window: as of the end of the history its queries carry."""

import json
from datetime import datetime, timedelta, timezone

from hir.evaluation.fresh import scoring_embeddings, serving_time, validation_follows_cutoff
from hir.evaluation.protocols import Split
from hir.settings import Settings
from hir.storage import META_FILE, Artifacts

CUTOFF = datetime(2014, 12, 31, tzinfo=timezone.utc)


def _split(protocol: str) -> Split:
    return Split(None, None, None, None, None, info={"protocol": protocol})


def test_leave_last_out_is_served_after_the_validation_day_temporal_at_the_cutoff():
    settings = Settings(val_days=1.0)
    assert serving_time(_split("leave_last_out"), CUTOFF, settings) == CUTOFF + timedelta(days=1)
    assert serving_time(_split("temporal"), CUTOFF, settings) == CUTOFF
    # and only there are the validation items unseen by the cut-off embeddings (they may tune a scorer)
    assert validation_follows_cutoff(_split("leave_last_out")) and not validation_follows_cutoff(_split("temporal"))


def test_temporal_windows_and_partitions_without_a_snapshot_keep_the_cutoff_embeddings(tmp_path):
    artifacts = Artifacts(tmp_path)
    assert scoring_embeddings(_split("leave_last_out"), artifacts, "2014-12-30", Settings()) == artifacts.embeddings("2014-12-30")
    folder = artifacts.snapshot_dir("2014-12-30")
    folder.mkdir(parents=True)
    (folder / META_FILE).write_text(json.dumps({"cutoff": CUTOFF.timestamp()}))
    assert scoring_embeddings(_split("temporal"), artifacts, "2014-12-30", Settings()) == artifacts.embeddings("2014-12-30")
