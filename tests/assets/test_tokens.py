"""Token assets end to end on a planted two-level interest hierarchy.

The world: 4 coarse interests × 3 fine ones, each fine interest with its own vocabulary. Users,
ads and products sit at ``centre[coarse] + offset[coarse, fine] + noise`` in the embedding space;
users engage mostly with ads of their own coarse interest; ads promote products of their own fine
interest; products belong to that fine category; each coarse interest has one advertiser.
"""

from __future__ import annotations

import string

import dagster as dg
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hir.assets.tokens import bom_index, bom_quantizer, bom_tokens, token_descriptions
from hir.cli.main import main
from hir.graph.warehouse import connect
from hir.models.quantizer import TOKEN_LEVEL_STRIDE, token_ids
from hir.partitions import cutoff_of
from hir.resources import build_resources
from hir.storage import write_parquet
from hir.tokens.bom import describe_tokens, find_bag, load_store

PARTITION = "2026-01-10"
COARSE, FINE, DIM = 4, 3, 16
COUNTS = {"user": 240, "ad": 120, "product": 60}
NAMES = ["sport", "music", "garden", "travel"]


def _words(c: int, f: int) -> list[str]:
    return [NAMES[c] + string.ascii_lowercase[f] + string.ascii_lowercase[j] for j in range(4)]


def _world(seed: int = 0):
    """Entities with planted (coarse, fine) labels, embeddings, snapshot edges and content."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(COARSE, DIM)) * 3.0
    offsets = rng.normal(size=(COARSE, FINE, DIM)) * 0.8
    rows = []
    for kind, n in COUNTS.items():
        coarse, fine = rng.integers(COARSE, size=n), rng.integers(FINE, size=n)
        rows += [(kind, f"{kind}{i}", c, f) for i, (c, f) in enumerate(zip(coarse, fine))]
    rows += [("advertiser", f"adv{c}", c, -1) for c in range(COARSE)]
    rows += [("category", f"cat{c}{f}", c, f) for c in range(COARSE) for f in range(FINE)]
    ents = pd.DataFrame(rows, columns=["entity_type", "source_key", "coarse", "fine"])
    ents["entity_id"] = np.arange(len(ents), dtype=np.int64)
    noise = rng.normal(size=(len(ents), DIM)) * 0.3
    vectors = centres[ents.coarse] + np.where(ents.fine.to_numpy()[:, None] >= 0, offsets[ents.coarse, ents.fine.clip(0)], 0) + noise
    return ents, vectors.astype(np.float32), rng


def _edges(ents: pd.DataFrame, rng) -> pd.DataFrame:
    """User→ad engagement (5 of 6 in the user's coarse interest) plus structural edges."""
    ads = ents[ents.entity_type == "ad"]
    edges = []
    for u in ents[ents.entity_type == "user"].itertuples():
        same = ads[ads.coarse == u.coarse].entity_id.to_numpy()
        picks = list(rng.choice(same, 5, replace=False)) + [rng.choice(ads.entity_id.to_numpy())]
        edges += [(u.entity_id, a, "click", rng.uniform(0.2, 1.0)) for a in picks]
    products = ents[ents.entity_type == "product"]
    cats = ents[ents.entity_type == "category"].set_index(["coarse", "fine"]).entity_id
    advs = ents[ents.entity_type == "advertiser"].set_index("coarse").entity_id
    for a in ads.itertuples():
        same = products[(products.coarse == a.coarse) & (products.fine == a.fine)].entity_id.to_numpy()
        if same.size:
            edges.append((a.entity_id, rng.choice(same), "promotes", 1.0))
        edges.append((a.entity_id, advs[a.coarse], "of_advertiser", 1.0))
    edges += [(p.entity_id, cats[(p.coarse, p.fine)], "in_category", 1.0) for p in products.itertuples()]
    return pd.DataFrame(edges, columns=["src", "dst", "edge_type", "weight"])


def _write_upstream(settings, ents, vectors, edges):
    """entity_embeddings and graph_snapshot partitions plus the warehouse tables the assets read."""
    cutoff = cutoff_of(PARTITION)
    art = settings.artifacts_dir
    n = len(ents)
    emb = pa.table({
        "entity_id": pa.array(ents.entity_id, pa.int64()),
        "entity_type": pa.array(ents.entity_type, pa.string()),
        "source_key": pa.array(ents.source_key, pa.string()),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel(), pa.float32()), DIM),
        "coarse_prototype": pa.array(np.zeros(n, np.int32)),
        "fine_prototype": pa.array(np.zeros(n, np.int32)),
        "model_version": pa.array(["test"] * n, pa.string()),
        "cutoff": pa.array([cutoff] * n, pa.timestamp("us", tz="UTC")),
    })
    write_parquet(art / "entity_embeddings" / PARTITION / "embeddings.parquet", emb)
    nodes = pd.DataFrame({"entity_id": ents.entity_id, "entity_type": ents.entity_type, "type_id": 0,
                          "degree": 1, "age_days": 1.0, "activity": 1.0})
    write_parquet(art / "graph_snapshot" / PARTITION / "nodes.parquet", nodes)
    last = int(cutoff.timestamp()) - 3600
    write_parquet(art / "graph_snapshot" / PARTITION / "edges.parquet", edges.assign(
        edge_type_id=0, count=1, last_ts=float(last)))
    valid = pd.Timestamp("2026-01-01", tz="UTC")
    content = pd.concat([
        pd.DataFrame({"entity_id": r.entity_id, "text": " ".join(_words(r.coarse, r.fine))} for r in ents.itertuples()
                     if r.entity_type in ("ad", "product")),
        pd.DataFrame({"entity_id": r.entity_id, "text": f"{NAMES[r.coarse]} {string.ascii_lowercase[r.fine]}"}
                     for r in ents.itertuples() if r.entity_type == "category"),
    ])
    relations = edges[edges.edge_type != "click"].rename(columns={"edge_type": "relation"})[["src", "dst", "relation"]]
    with connect(settings.warehouse_path) as con:
        con.register("e", ents.assign(first_seen=valid, attrs=None)[["entity_id", "entity_type", "source_key", "first_seen", "attrs"]])
        con.execute("INSERT INTO entities SELECT * FROM e")
        con.register("c", content.assign(image_uri=None, content_hash="h"))
        con.execute("INSERT INTO content SELECT entity_id, text, image_uri, content_hash FROM c")
        con.register("r", relations.assign(valid_from=valid))
        con.execute("INSERT INTO relations SELECT src, dst, relation, valid_from FROM r")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Materialise the four token assets once on the planted world."""
    mp = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("tokens_home")
    for name, value in {"HIR_DATA_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "HIR_BOM_CODES": "8,16,32",
                        "HIR_BOM_ITERATIONS": "3", "HIR_BOM_INTERESTS": "6", "HIR_BOM_OWN_WEIGHT": "0.5", "HIR_THREADS": "1", "HIR_DEVICE": "cpu"}.items():
        mp.setenv(name, value)
    (home / "dagster").mkdir()
    from hir.settings import Settings

    settings = Settings.from_env()
    ents, vectors, rng = _world()
    _write_upstream(settings, ents, vectors, _edges(ents, rng))
    result = dg.materialize([bom_quantizer, bom_tokens, bom_index, token_descriptions], partition_key=PARTITION,
                            resources=build_resources(settings))
    yield settings, ents, result
    mp.undo()


def test_assets_materialise_with_metadata(built):
    _, ents, result = built
    assert result.success
    meta = {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}
    assert set(meta) == {"bom_quantizer", "bom_tokens", "bom_index", "token_descriptions"}
    mse = meta["bom_quantizer"]["mse_per_level"].data
    assert mse[0] > mse[1] > mse[2]
    assert "data:image/png;base64" in meta["bom_quantizer"]["code_usage"].md_str
    assert meta["bom_tokens"]["dagster/row_count"].value == len(ents)
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {"bag_tokens_indexed": True}


def test_every_bag_token_is_in_the_index(built):
    settings, _, _ = built
    store = load_store(settings, PARTITION)
    for bag in store.bags.to_pylist():
        tokens = torch.tensor(bag["tokens"], dtype=torch.int64)
        positions, query = store.index.postings(tokens)
        ids = store.index.entity_ids[store.index.rows[positions]]
        assert set(query[ids == bag["entity_id"]].tolist()) == set(range(len(bag["tokens"])))
        assert all(t // TOKEN_LEVEL_STRIDE in (1, 2, 3) for t in bag["tokens"])


def test_bags_hold_interests(built):
    settings, ents, _ = built
    store = load_store(settings, PARTITION)
    user = find_bag(store, "user", "user0")
    assert len(user["tokens"]) > 3  # own codes plus interests
    advertiser = find_bag(store, "advertiser", "adv0")
    assert len(advertiser["tokens"]) > 3  # interests served through its ads
    category = find_bag(store, "category", "cat00")
    assert len(category["tokens"]) == 3  # its own nested tokens only
    assert sum(w * w for w in category["weights"]) == pytest.approx(1.0, rel=1e-5)  # every bag has unit norm
    levels = sorted(t // TOKEN_LEVEL_STRIDE for t in category["tokens"])
    assert levels == [1, 2, 3]


def test_a_fine_token_implies_its_coarse_token(built):
    """Entities sharing an own level-2 (or 3) token share every coarser own token."""
    settings, _, _ = built
    from hir.tokens.bom import codes_setting, read_codes

    _, codes = read_codes(settings.artifacts_dir / "bom_quantizer" / PARTITION / "codes.parquet")
    tokens = token_ids(torch.from_numpy(codes), codes_setting(settings))
    for level in (1, 2):
        fine, coarse = tokens[:, level], tokens[:, level - 1]
        for t in fine.unique():
            assert coarse[fine == t].unique().numel() == 1
    assert tokens[:, 2].unique().numel() > tokens[:, 1].unique().numel() > tokens[:, 0].unique().numel()


def test_bags_record_their_temperature_prior_and_dense_recall(built):
    settings, ents, result = built
    table = pq.read_table(settings.artifacts_dir / "bom_tokens" / PARTITION / "tokens.parquet")
    assert float(table.schema.metadata[b"bag_temperature"]) > 0
    prior = dict(zip(table.column("source_key").to_pylist(), table.column("log_prior").to_pylist()))
    assert prior["ad0"] > 0 and prior["cat00"] == 0  # ads are engaged by users, categories are not
    meta = {e.asset_key.to_user_string(): e.materialization.metadata for e in result.get_asset_materialization_events()}
    kept = meta["bom_tokens"]["recall_of_dense_top100"].data
    assert set(kept) == {"ad"}  # the only serving type with more than 100 entities
    assert 0.3 < kept["ad"]["with_prior"] <= 1.0 and 0 < kept["ad"]["no_prior"] <= 1.0
    assert float(table.schema.metadata[b"query_temperature"]) == meta["bom_tokens"]["query_temperature"].value > 0
    probed = meta["bom_tokens"]["query_recall_of_dense_top100"].data
    print(f"dense top-100 kept: own bags {kept['ad']}, query bags {probed['ad']}")
    assert set(probed) == {"ad"} and probed["ad"]["no_prior"] > kept["ad"]["no_prior"]  # probes reach past the own cell


def _planted_embeddings(types: list[str], codes: np.ndarray):
    from hir.tokens.bom import Embeddings

    n = len(types)
    return Embeddings(np.arange(n), np.asarray(types, dtype=object), np.asarray([f"k{i}" for i in range(n)], dtype=object),
                      np.zeros((n, 2), np.float32)), token_ids(torch.from_numpy(codes), [4, 4]).numpy()


def test_equal_bags_score_equally_whatever_their_kind():
    """A cold user, a cold product, and a user and a product whose mixes repeat their own tokens
    hold one bag, so a query scores them equally."""
    import scipy.sparse as sp
    from hir.models.index import InvertedIndex
    from hir.settings import Settings
    from hir.tokens.bom import build_bags

    types = ["user", "product", "user", "product", "product", "user"]
    codes = np.array([[1, 2], [1, 2], [1, 2], [1, 2], [3, 0], [3, 1]])
    emb, tokens = _planted_embeddings(types, codes)
    engagement = sp.csr_matrix(([2.0, 2.0, 1.0, 1.0], ([2, 3, 5, 4], [3, 2, 4, 5])), shape=(6, 6))
    bags, columns = build_bags(emb, tokens, engagement, Settings().replace(bom_own_weight=0.5))
    dense = bags.toarray()
    for row in (1, 2, 3):
        assert np.allclose(dense[row], dense[0])
    rows, cols = bags.nonzero()
    index = InvertedIndex.build(torch.from_numpy(rows), torch.from_numpy(columns[cols]), torch.from_numpy(bags.data),
                                torch.arange(6), torch.tensor([0, 1, 0, 1, 1, 0]), ["user", "product"])
    scores = index.scores(torch.from_numpy(columns[bags[0].indices]), torch.from_numpy(bags[0].data))
    assert torch.allclose(scores[:4], scores[0].expand(4)) and scores[0] > scores[4]


def _tiny_probe():
    """Codebooks along x (level 1) and y (level 2): paths (0,0) → (1, .5), (0,1) → (1, −.5),
    (1,0) → (−1, .5), (1,1) → (−1, −.5); the ad holds the only (1,1)."""
    from hir.models.quantizer import HierarchicalQuantizer, QuantizerConfig
    from hir.tokens.bom import QueryProbe

    codebooks = [torch.tensor([[1.0, 0.0], [-1.0, 0.0]]), torch.tensor([[0.0, 0.5], [0.0, -0.5]])]
    quantizer = HierarchicalQuantizer(QuantizerConfig(dim=2, codes=[2, 2]), codebooks)
    codes = np.array([[0, 0], [0, 1], [1, 0], [0, 0], [1, 1]])
    types = np.array(["product"] * 4 + ["ad"], dtype=object)
    return QueryProbe(quantizer, codes, types, {"user": [0.0, 0.0], "product": [0.0, 0.0], "ad": [0.0, 0.0]})


def test_a_query_bag_probes_the_finest_tokens_of_the_target_type_nearest_the_query():
    from hir.tokens.bom import QUERY_FLOOR

    probe = _tiny_probe()
    fine = token_ids(torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]]), [2, 2])[:, 1].numpy()
    tokens, weights = probe.bags(np.array([[3.0, 4.0]]), "user", "product", 2)
    # cosines of the query (.6, .8) with (1, .5), (1, −.5), (−1, .5) over their norm √1.25: 1.0, 0.2, −0.2;
    # the ad's (1,1) is not a product path
    assert tokens.tolist() == [[fine[0], fine[1]]]
    assert np.allclose(weights, [[(1.0 - 0.2) / np.sqrt(1.25) + QUERY_FLOOR, QUERY_FLOOR]])
    tokens, _ = probe.bags(np.array([[3.0, 4.0]]), "user", "ad", 5)
    assert tokens.tolist() == [[fine[3]]]
    matrix = probe.matrix(np.array([[3.0, 4.0], [0.0, 0.0]]), "user", "product", 3, np.sort(fine[:2]))
    assert matrix.shape == (2, 2) and matrix[1].nnz == 0 and matrix[0].nnz == 2  # unknown token, no vector: left out


def test_a_query_bag_of_a_type_the_quantizer_never_saw_is_a_clear_error():
    from hir.errors import SettingsError

    probe = _tiny_probe()
    for query_type, target_type in (("campaign", "product"), ("user", "campaign")):
        with pytest.raises(SettingsError, match="saw no 'campaign' entities"):
            probe.bags(np.array([[1.0, 0.0]]), query_type, target_type, 2)


def test_a_query_bag_scores_paths_by_the_cosine_of_their_items_not_by_the_centred_codes():
    """Unit items ``μ + ρ v`` around a type mean ``μ`` (``v`` unit and orthogonal to it, the codewords):
    the path directions are the items themselves, so the bag's weights are the query's cosines with
    them, as the dense scorer ranks them, whatever the users' mean; the query centred on its type's
    mean and scored against the centred codes ``v`` would rank the paths otherwise."""
    from hir.models.quantizer import HierarchicalQuantizer, QuantizerConfig
    from hir.tokens.bom import QUERY_FLOOR, QueryProbe, centre, path_directions

    offset, radius = 0.6, 0.8
    v = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]], np.float32)
    items = offset * np.eye(3, dtype=np.float32)[0] + radius * v
    quantizer = HierarchicalQuantizer(QuantizerConfig(dim=3, codes=[4]), [torch.from_numpy(v)])
    mean = items.mean(0)
    assert np.allclose(path_directions(v, mean), items, atol=1e-6)
    probe = QueryProbe(quantizer, np.arange(4)[:, None], np.array(["product"] * 4, dtype=object),
                       {"user": [0.0, 0.9, 0.0], "product": mean.tolist()})
    query = np.array([[-2.0, 1.0, 0.5]], np.float32)
    tokens, weights = probe.bags(query, "user", "product", 4)
    cosines = (items @ query[0]) / np.linalg.norm(query)
    order = np.argsort(-cosines)
    fine = token_ids(torch.arange(4)[:, None], [4])[:, 0].numpy()
    assert tokens[0].tolist() == fine[order].tolist()
    assert np.allclose(weights[0], cosines[order] - cosines[order][-1] + QUERY_FLOOR, atol=1e-6)
    assert np.argsort(-(v @ centre(query, [0.0, 0.9, 0.0])[0])).tolist() != order.tolist()


def test_query_bags_over_every_path_rank_items_as_their_reconstruction_does():
    """With every path probed, an item's overlap with its own finest token is its path's score above
    the last: the ranking of ⟨x, Σ_m C_m[i_m]⟩, which the tokens approximate for fewer probes."""
    from hir.models.quantizer import HierarchicalQuantizer, QuantizerConfig
    from hir.tokens.bom import query_bags, type_paths

    rng = np.random.default_rng(0)
    items = torch.from_numpy(rng.normal(size=(300, 8)).astype(np.float32))
    quantizer = HierarchicalQuantizer(QuantizerConfig(dim=8, codes=[4, 8], iterations=2, ils_rounds=0, seed=0))
    quantizer.fit(items)
    codes = quantizer.encode(items).numpy()
    tokens, centres = type_paths(quantizer, codes, np.zeros(300), 0, [4, 8])
    queries = rng.normal(size=(5, 8)).astype(np.float32)
    q_tokens, q_weights = query_bags(queries, tokens, centres, tokens.size)
    own = token_ids(torch.from_numpy(codes), [4, 8])[:, 1].numpy()
    reconstruction = queries @ quantizer.decode(torch.from_numpy(codes)).numpy().T
    for q in range(5):
        overlap = dict(zip(q_tokens[q].tolist(), q_weights[q].tolist()))
        scores = np.array([overlap[t] for t in own])
        assert np.allclose(scores - scores.min(), reconstruction[q] - reconstruction[q].min(), atol=1e-5)


def test_a_fine_token_names_its_coarse_token():
    from hir.tokens.bom import coarse_token

    codes = torch.tensor([[3, 5, 9], [0, 7, 15]])
    tokens = token_ids(codes, [4, 8, 16])
    for row in tokens:
        assert [coarse_token(int(t), [4, 8, 16]) for t in row] == [int(row[0])] * 3


def test_a_token_every_bag_holds_adds_nothing():
    """``idf = log(N / N) = 0``: adding one token to every bag leaves every ranking as it was."""
    import scipy.sparse as sp
    from hir.tokens.bom import bag_weights

    rng = np.random.default_rng(0)
    mass = sp.random(40, 12, density=0.3, random_state=1, format="csr") + sp.csr_matrix(np.eye(40, 12))
    everywhere = sp.hstack([mass, sp.csr_matrix(rng.uniform(0.1, 1.0, (40, 1)))]).tocsr()
    plain, common = bag_weights(mass), bag_weights(everywhere)
    assert np.allclose(common.toarray()[:, -1], 0)
    assert np.allclose(common.toarray()[:, :-1], plain.toarray())
    assert np.allclose(np.linalg.norm(plain.toarray(), axis=1), 1)


def _agreement(settings, ents) -> float:
    """Share of users' top-10 retrieved ads whose planted coarse interest is the user's."""
    store = load_store(settings, PARTITION)
    coarse = dict(zip(ents.entity_id, ents.coarse))
    hits = total = 0
    for user in ents[ents.entity_type == "user"].source_key:
        bag = find_bag(store, "user", user)
        rows, _ = store.index.search(torch.tensor(bag["tokens"]), torch.tensor(bag["weights"]), 10, entity_type="ad")
        got = [coarse[int(store.index.entity_ids[r])] for r in rows]
        assert all(ents.entity_type[int(store.index.entity_ids[r])] == "ad" for r in rows)
        hits += sum(c == coarse[bag["entity_id"]] for c in got)
        total += len(got)
    return hits / total


def test_retrieved_ads_share_the_planted_coarse_interest(built):
    settings, ents, _ = built
    rate = _agreement(settings, ents)
    print(f"planted coarse agreement of top-10 ads: {rate:.3f} (chance {1 / COARSE:.2f})")
    assert rate > 0.85


def test_descriptions_name_the_planted_vocabulary(built):
    settings, ents, _ = built
    table = pq.read_table(settings.artifacts_dir / "token_descriptions" / PARTITION / "descriptions.parquet").to_pylist()
    level1 = [r for r in table if r["level"] == 1]
    assert len(level1) == 8 and all(r["path"] == r["token"] % TOKEN_LEVEL_STRIDE for r in table)
    for r in level1:
        prefixes = {name for t in r["top_terms"] for name in NAMES if t.startswith(name)}
        assert len(prefixes) == 1 and len(r["top_terms"]) == 5, r  # one coarse interest's words
        assert any(label.split()[0] in prefixes for label in r["top_labels"]), r
    assert (settings.artifacts_dir / "token_descriptions" / PARTITION / "descriptions.md").exists()


def test_describe_tokens_without_content_or_labels():
    postings = pa.table({"token": pa.array([1_000_001, 1_000_001, 2_000_000], pa.int64()),
                         "entity_id": pa.array([1, 2, 3], pa.int64()), "weight": pa.array([1.0, 0.5, 1.0], pa.float32())})
    empty = pd.DataFrame({"entity_id": pd.Series([], dtype="int64"), "text": pd.Series([], dtype="object")})
    table = describe_tokens(postings, empty, pd.DataFrame({"entity_id": [], "label": []})).to_pylist()
    assert [(r["token"], r["entities"], r["description"]) for r in table] == [(1_000_001, 2, ""), (2_000_000, 1, "")]


def test_retrieve_and_tokens_commands(built, capsys):
    settings, ents, _ = built
    assert main(["retrieve", "user0", "--k", "5", "--explain", "--type", "ad"]) == 0
    out = capsys.readouterr().out
    assert out.count(". ad ") == 5 and "L1:" in out and " — " in out
    assert main(["retrieve", "adv1", "--from", "advertiser", "--type", "user", "--k", "3"]) == 0
    assert capsys.readouterr().out.count(". user ") == 3
    assert main(["tokens", "product", "product0"]) == 0
    assert "L1:" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["retrieve", "nobody"], ["tokens", "user", "nobody"], ["tokens", "spaceship", "x"],
                                  ["retrieve", "user0", "--partition", "1999-01-01"],
                                  ["retrieve", "user0"]])  # no events: no item type the evaluation ranks
def test_unknown_keys_give_one_line_errors(built, capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_query_bags_made_in_chunks_equal_one_pass(monkeypatch):
    """Queries are scored a chunk at a time (memory: a chunk × paths, not every query × paths)."""
    from hir.tokens import bom

    gen = np.random.default_rng(0)
    queries, centres = gen.normal(size=(10, 4)), gen.normal(size=(30, 4))
    tokens = np.arange(100, 130)
    whole = bom.query_bags(queries, tokens, centres, 5)
    monkeypatch.setattr(bom, "QUERY_CHUNK", 3)
    chunked = bom.query_bags(queries, tokens, centres, 5)
    assert np.array_equal(whole[0], chunked[0])
    assert np.allclose(whole[1], chunked[1], rtol=1e-5, atol=1e-6)  # a float32 matmul's blocking follows its shape
    assert bom.query_bags(queries[:0], tokens, centres, 5)[0].shape == (0, 5)
