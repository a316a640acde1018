"""Benchmarks for `hir bench NAME`: each module exposes add_arguments(parser) and run(args) -> dict."""
