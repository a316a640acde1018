"""Nested interest clusters: free of the node-type offset, every fine cluster inside one coarse."""

import pytest
import torch
from hir.models.clustering import nested_clusters
from sklearn.metrics import normalized_mutual_info_score

pytestmark = pytest.mark.usefixtures("one_thread")


def test_nested_clusters_ignore_a_type_offset_and_nest():
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(400) % 4
    types = (torch.arange(400) // 200) % 2
    centres = torch.nn.functional.normalize(torch.randn(4, 16, generator=gen), dim=1)
    x = centres[labels] + 0.1 * torch.randn(400, 16, generator=gen) + 3.0 * types[:, None] * torch.ones(16)
    coarse, fine = nested_clusters(x, types, 4, 8)
    assert normalized_mutual_info_score(labels.numpy(), coarse.numpy()) > 0.9
    assert torch.equal(fine // 2, coarse)
