"""`hir bench train` and `hir bench refresh` run end to end on tiny planted graphs."""

import argparse

import pytest


def _args(module, argv):
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(argv)


def test_bench_train_reports_throughput_and_mfu():
    from hir.bench import train

    args = _args(train, "--steps 1 --warmup 0 --batch 4 --dim 16 --layers 1 --heads 2 --broad-tokens 8 "
                        "--narrow-tokens 4 --users 40 --matmul 128 --device cpu".split())
    out = train.run(args)
    assert set(out) >= {"views_per_s", "step_ms", "model_gflop_per_step", "achieved_gflops", "matmul_peak_gflops", "mfu"}
    assert out["model_gflop_per_step"] > 0 and out["matmul_peak_gflops"] > 0
    assert 0 < out["mfu"] < 1
    assert out["mfu"] == pytest.approx(out["achieved_gflops"] / out["matmul_peak_gflops"], rel=0.01)


def test_bench_refresh_compares_scratch_and_warm_start():
    from hir.bench import refresh

    args = _args(refresh, "--graph planted --users 60 --days 4 --steps 4 --finetune-steps 1 --batch 4 --dim 16 "
                          "--layers 1 --heads 2".split())
    out = refresh.run(args)
    assert out["graph"] == "planted" and out["next_day_edges"] > 0
    assert out["time_ratio"] == pytest.approx(out["warm_s"] / out["scratch_s"], rel=0.1, abs=0.05)
    assert 0.0 <= out["warm_engagement_auc"] <= 1.0 and 0.0 <= out["scratch_engagement_auc"] <= 1.0
