"""hir: Hierarchical Interest Representation for ads and recommendation."""
