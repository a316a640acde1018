"""The engagement head learns which edges exist on a planted graph; negatives and AUC behave."""

import torch
from hir.models.engagement import (
    EngagementHead,
    auc,
    engagement_loss,
    in_batch_permutation,
    popularity_negatives,
    popularity_weights,
    random_negatives,
    time_encoding,
)
from hir.models.planted import planted_events, snapshot_at, split_edges


def test_auc_counts_ordered_pairs_and_ties():
    assert auc(torch.tensor([3.0, 4.0]), torch.tensor([1.0, 2.0])) == 1.0
    assert auc(torch.tensor([1.0]), torch.tensor([2.0])) == 0.0
    assert auc(torch.tensor([1.0, 1.0]), torch.tensor([1.0])) == 0.5


def test_popularity_negatives_follow_degree():
    degree = torch.tensor([0, 1, 100, 10])
    draws = popularity_negatives(popularity_weights(degree), 5000, torch.Generator().manual_seed(0))
    counts = torch.bincount(draws, minlength=4)
    assert counts[0] == 0
    assert counts[2] > counts[3] > counts[1]


def test_in_batch_permutation_never_pairs_an_edge_with_itself():
    g = torch.Generator().manual_seed(0)
    for n in (2, 5, 17):
        perm = in_batch_permutation(n, g)
        assert sorted(perm.tolist()) == list(range(n))
        assert (perm != torch.arange(n)).all()


def test_time_encoding_is_bounded_and_distinguishes_ages():
    enc = time_encoding(torch.tensor([0.0, 1.0, 30.0]), 8)
    assert enc.shape == (3, 8) and enc.abs().max() <= 1.0
    assert not torch.allclose(enc[1], enc[2])


def test_head_broadcasts_a_user_against_its_candidates_as_pair_by_pair():
    torch.manual_seed(0)
    head = EngagementHead(8, num_types=3, hidden=8)
    torch.nn.init.normal_(head.type_gate.weight)
    u, v = torch.randn(2, 8), torch.randn(2, 5, 8)
    edge_type, age = torch.tensor([[1], [2]]), torch.tensor([[0.0], [3.0]])
    broadcast = head(u[:, None], v, edge_type, age)
    flat = head(u.repeat_interleave(5, 0), v.reshape(10, 8), edge_type.repeat_interleave(5), age.repeat_interleave(5))
    assert broadcast.shape == (2, 5)
    assert torch.allclose(broadcast.reshape(-1), flat, atol=1e-6)


def test_head_scores_held_out_edges_above_negatives():
    torch.manual_seed(0)
    events = planted_events(users=200, items=120, coarse=4, fine_per_coarse=2, events_per_user=10, p_fine=0.8, p_coarse=0.15)
    graph, _ = snapshot_at(events, float(events.ts.max()) + 1)
    train, held = split_edges(graph, held_out=0.15, seed=0)
    rows, cols = train.csr.to_edge_list()
    table = torch.nn.Embedding(graph.num_nodes, 16)
    head = EngagementHead(16, len(graph.edge_types), hidden=16)
    opt = torch.optim.Adam(list(table.parameters()) + list(head.parameters()), lr=0.02)
    g = torch.Generator().manual_seed(0)
    cumulative = popularity_weights(train.csr.degree())
    age = torch.zeros(256)
    for _ in range(300):
        pick = torch.randint(0, rows.numel(), (256,), generator=g)
        u, v, etype = table(rows[pick]), table(cols[pick]), train.csr.edge_type[pick]
        negs = [
            table(random_negatives(graph.num_nodes, 256, g)),
            table(popularity_negatives(cumulative, 256, g)),
            v[in_batch_permutation(256, g)],
        ]
        loss, _, _ = engagement_loss(head, u, v, negs, etype, age)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        src, dst, etype = held.T
        items = torch.nonzero(graph.node_type == 1).flatten()
        fake = items[torch.randint(0, items.numel(), (dst.numel(),), generator=g)]
        zero = torch.zeros(dst.numel())
        pos = head(table(src), table(dst), etype, zero)
        neg = head(table(src), table(fake), etype, zero)
    assert auc(pos, neg) > 0.7
