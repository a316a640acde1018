"""`hir bench quantizer` and `hir bench retrieval` on tiny inputs: one JSON line with every key."""

from __future__ import annotations

import json

from hir.cli.bench.retrieval import IVFPQ_SETTINGS, _fastest_at_recall
from hir.cli.main import main


def _json_line(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_bench_quantizer_reports_hir_and_faiss(capsys):
    argv = ["bench", "quantizer", "--json", "--n", "600", "--dim", "8", "--codebooks", "2", "--nbits", "4", "--iterations", "2"]
    assert main(argv) == 0
    out = _json_line(capsys)
    assert set(out) == {"n", "dim", "codebooks", "codes", "hir_mse", "faiss_rq_mse", "faiss_lsq_mse", "ratio_to_best_faiss"}
    assert (out["n"], out["dim"], out["codebooks"], out["codes"]) == (600, 8, 2, 16)
    best = min(out["faiss_rq_mse"], out["faiss_lsq_mse"])
    assert abs(out["ratio_to_best_faiss"] - out["hir_mse"] / best) < 1e-3


def test_bench_retrieval_reports_speed_and_recall(capsys):
    argv = ["bench", "retrieval", "--json", "--items", "3000", "--dim", "16", "--queries", "10", "--codes", "8,32",
            "--train", "1000", "--probes", "30", "--candidates", "600"]
    assert main(argv) == 0
    out = _json_line(capsys)
    assert set(out) == {"items", "index_p50_ms", "exact_p50_ms", "speedup_vs_exact", "recall_at_100_vs_exact", "query_bag_p50_ms",
                        "faiss_ivfpq_p50_ms", "faiss_ivfpq_recall_at_100", "faiss_ivfpq_nprobe", "faiss_ivfpq_refine",
                        "faiss_ivfflat_p50_ms", "faiss_ivfflat_recall_at_100", "faiss_ivfflat_nprobe"}
    assert out["items"] == 3000
    # at most 600 of 3,000 items re-ranked: a candidate set no better than chance would find about 20% of the top 100
    assert 0.8 < out["recall_at_100_vs_exact"] <= 1.0
    # FAISS is compared at the token index's recall: IVF-Flat probing up to 64 of ~219 lists reaches it here
    assert out["faiss_ivfflat_recall_at_100"] >= out["recall_at_100_vs_exact"]
    assert (out["faiss_ivfpq_nprobe"], out["faiss_ivfpq_refine"]) in IVFPQ_SETTINGS


def test_faiss_setting_is_the_fastest_reaching_the_recall_else_the_most_accurate():
    trials = [({"n": 1}, 0.1, 0.80), ({"n": 2}, 0.2, 0.96), ({"n": 3}, 0.15, 0.97), ({"n": 4}, 0.4, 0.99)]
    assert _fastest_at_recall(trials, 0.95)[0] == {"n": 3}
    assert _fastest_at_recall(trials, 0.995)[0] == {"n": 4}
    assert _fastest_at_recall(trials, 0.5)[0] == {"n": 1}
