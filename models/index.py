"""Inverted index over Bag-of-Meaning tokens: token → (entity, weight), in compact CSR arrays.

Layout (``T`` distinct tokens, ``P`` postings, ``N`` entities):

* ``tokens`` int64 ``[T]`` sorted; the postings of ``tokens[t]`` are ``offsets[t] : offsets[t+1]``
  of ``rows`` (int64 entity row, ``0 … N−1``) and ``weights`` (float32 ``w(t, e)``);
* ``entity_ids`` int64 ``[N]`` (warehouse ids) and ``entity_types`` int64 ``[N]`` (index into
  ``type_names``) describe the rows.

Retrieval for a query bag ``{(t, q_t)}`` scores every entity by weighted token overlap

    s(e) = Σ_t q_t · w(t, e)      (optionally ranked by s(e) / τ + prior(e)),

computed by gathering the postings of the query's tokens and scatter-adding ``q_t · w(t, e)`` over
the distinct rows touched; the top ``k`` (optionally of one entity type only) are returned. With a
``budget``, only the rarest tokens' postings are gathered (the candidate set) and the common tokens
are scored on those candidates by binary search in their row-sorted postings (MaxScore-style). With
a re-rank, the top ``candidates`` by overlap are re-ordered by the embedding score ``⟨u, v_e⟩``;
when the gathered postings number at most ``candidates``, all of them are re-ranked directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

RUN_ROWS = 128
"""Least mean rows per list for the in-place re-rank of :meth:`InvertedIndex._rerank_all`: one
slice's product costs a fixed ~2.5 µs plus the rows' memory read, a gather ~2.4 × that read per row
(measured on 64-d float32 rows), so slicing pays from about 140 rows a list."""


def _ranges(first: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The ranges ``first[i] … first[i] + length[i] − 1`` laid end to end, without a Python loop:
    element j of range i is ``first[i] + (j − offset[i])``, ``offset`` the ranges' cumulative lengths."""
    offset = np.cumsum(length) - length
    return np.repeat(first - offset, length) + np.arange(int(length.sum()))


@dataclass
class InvertedIndex:
    """CSR postings; build with :meth:`build`, query with :meth:`search` and :meth:`explain`."""

    tokens: torch.Tensor
    offsets: torch.Tensor
    rows: torch.Tensor
    weights: torch.Tensor
    entity_ids: torch.Tensor
    entity_types: torch.Tensor
    type_names: list[str]
    _masks: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)
    _spans: dict[int, tuple[int, int]] | None = field(default=None, repr=False)
    _numpy: dict | None = field(default=None, repr=False)

    @classmethod
    def build(
        cls,
        rows: torch.Tensor,
        tokens: torch.Tensor,
        weights: torch.Tensor,
        entity_ids: torch.Tensor,
        entity_types: torch.Tensor,
        type_names: list[str],
    ) -> "InvertedIndex":
        """Index flattened bags.

        Args:
            rows: int64 ``[P]`` entity row of each (token, weight) pair.
            tokens: int64 ``[P]`` token ids. weights: float ``[P]`` bag weights.
            entity_ids: int64 ``[N]`` warehouse id per row. entity_types: int64 ``[N]`` type per row.
            type_names: names of the type codes.
        Pairs repeating a (token, row) are summed.
        """
        rows, tokens = rows.long(), tokens.long()
        n = max(int(entity_ids.numel()), 1)
        key = tokens * n + rows
        key, inverse = torch.unique(key, sorted=True, return_inverse=True)
        summed = torch.zeros(key.numel(), dtype=torch.float32).index_add_(0, inverse, weights.float())
        post_tokens, post_rows = key // n, key % n
        uniq, counts = torch.unique_consecutive(post_tokens, return_counts=True)
        offsets = torch.zeros(uniq.numel() + 1, dtype=torch.int64)
        offsets[1:] = torch.cumsum(counts, 0)
        return cls(uniq, offsets, post_rows, summed, entity_ids.long(), entity_types.long(), list(type_names))

    @property
    def num_entities(self) -> int:
        return int(self.entity_ids.numel())

    def type_mask(self, entity_type: str) -> torch.Tensor:
        """Boolean ``[N]``: rows of ``entity_type`` (cached); unknown types match nothing."""
        if entity_type not in self._masks:
            code = self.type_names.index(entity_type) if entity_type in self.type_names else -1
            self._masks[entity_type] = self.entity_types == code
        return self._masks[entity_type]

    def postings(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posting positions of ``tokens`` and, for each, the index of its query token."""
        tokens = tokens.long()
        slot = torch.searchsorted(self.tokens, tokens).clamp_max(max(self.tokens.numel() - 1, 0))
        found = self.tokens[slot] == tokens if self.tokens.numel() else torch.zeros_like(tokens, dtype=torch.bool)
        start = self.offsets[slot]
        length = torch.where(found, self.offsets[slot + 1] - start, torch.zeros_like(start))
        query_index = torch.repeat_interleave(torch.arange(tokens.numel()), length)
        first = torch.cumsum(length, 0) - length
        positions = start[query_index] + torch.arange(int(length.sum())) - first[query_index]
        return positions, query_index

    def _plan(self, tokens: torch.Tensor, weights: torch.Tensor, budget: int) -> tuple[list, list]:
        """Split the query's known tokens into gathered and probed ``(start, end, weight)`` spans.

        Spans are taken shortest first while their postings total at most ``budget`` (at least
        one; all when ``budget`` is 0). Planning runs in Python: a query has a handful of tokens.
        """
        if self._spans is None:
            bounds = self.offsets.tolist()
            self._spans = {t: (bounds[i], bounds[i + 1]) for i, t in enumerate(self.tokens.tolist())}
        spans = sorted(
            (self._spans[t] + (w,) for t, w in zip(tokens.tolist(), weights.tolist()) if t in self._spans),
            key=lambda span: span[1] - span[0],
        )
        total, gathered = 0, []
        for span in spans:
            total += span[1] - span[0]
            if gathered and budget > 0 and total > budget:
                break
            gathered.append(span)
        return gathered, spans[len(gathered):]

    def _gather(self, gathered: list) -> tuple[torch.Tensor, torch.Tensor]:
        """Distinct rows of the gathered spans and the index of each concatenated posting's row among them."""
        if len(gathered) == 1:
            rows = self.rows[gathered[0][0]:gathered[0][1]]
            return rows, torch.arange(rows.numel())
        rows = torch.cat([self.rows[a:b] for a, b, _ in gathered]) if gathered else self.rows[:0]
        return torch.unique(rows, return_inverse=True)

    def candidates(
        self, tokens: torch.Tensor, weights: torch.Tensor, budget: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Distinct candidate rows touched by the query and their exact overlap scores.

        Args:
            tokens, weights: the query bag.
            budget: 0 gathers every posting of every query token. Otherwise the query's tokens are
                taken shortest posting list first while their postings total at most ``budget``
                (at least one token): their postings form the candidate set (MaxScore-style), and
                the remaining, common tokens only add their weight to candidates found in their
                row-sorted postings by binary search. An entity matching common tokens only is
                then skipped; its score is at most the sum of those tokens' query weights.
        """
        gathered, probed = self._plan(tokens, weights, budget)
        rows, inverse = self._gather(gathered)
        contrib = torch.cat([self.weights[a:b] * w for a, b, w in gathered]) if gathered else self.weights[:0]
        scores = torch.zeros(rows.numel()).index_add_(0, inverse, contrib)
        for a, b, w in probed:
            segment = self.rows[a:b]
            at = torch.searchsorted(segment, rows).clamp_max(segment.numel() - 1)
            scores += torch.where(segment[at] == rows, self.weights[a + at] * w, 0.0)
        return rows, scores

    def scores(self, tokens: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Dense ``[N]`` overlap scores ``s(e) = Σ_t q_t · w(t, e)``."""
        rows, values = self.candidates(tokens, weights)
        return torch.zeros(self.num_entities).index_put_((rows,), values)

    def search(
        self,
        tokens: torch.Tensor,
        weights: torch.Tensor,
        k: int,
        entity_type: str | None = None,
        query_vector: torch.Tensor | None = None,
        vectors: torch.Tensor | None = None,
        candidates: int = 0,
        budget: int = 0,
        prior: torch.Tensor | None = None,
        temperature: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Top ``k`` rows (and their scores) for a query bag.

        Args:
            tokens, weights: the query bag. k: results wanted.
            entity_type: keep only rows of this type.
            query_vector, vectors, candidates: when all given, the top ``candidates`` rows by
                overlap are re-ranked by ``vectors[row] · query_vector`` (``vectors`` ``[N, d]``)
                and the scores returned are embedding scores; when the gathered postings number at
                most ``candidates``, every gathered row is re-ranked.
            budget: postings gathered for the candidate set (see :meth:`candidates`; 0 = all).
            prior, temperature: with ``prior`` (``[N]``, e.g. ``log(1 + p_e)``), rows touched by
                the query are ranked by ``s(e) / temperature + prior[e]`` instead of ``s(e)``.
        Only rows with a positive overlap are returned, so fewer than ``k`` may come back.
        """
        rerank = query_vector is not None and vectors is not None and candidates > 0
        if rerank:
            start, end = self._gathered_lists(tokens, weights, budget)
            if int((end - start).sum()) <= candidates:
                return self._rerank_all(start, end, k, entity_type, query_vector, vectors)
        rows, scores = self.candidates(tokens, weights, budget)
        keep = scores > 0
        if entity_type is not None:
            keep &= self.type_mask(entity_type)[rows]
        rows, scores = rows[keep], scores[keep]
        if prior is not None:
            scores = scores / temperature + prior.index_select(0, rows)
        top = scores.topk(min(candidates if rerank else k, rows.numel()))
        rows = rows.index_select(0, top.indices)
        if not rerank:
            return rows, top.values
        best = (vectors.index_select(0, rows) @ query_vector.to(vectors.dtype)).topk(min(k, rows.numel()))
        return rows.index_select(0, best.indices), best.values

    def _arrays(self) -> dict:
        """NumPy views of the postings (cached): the re-rank path runs a handful of small array
        operations per query, where NumPy's per-call cost is a fraction of torch's."""
        if self._numpy is None:
            # the tokens end with a sentinel above every id, so a binary search never runs off the end
            sentinel = np.iinfo(np.int64).max
            self._numpy = {"tokens": np.append(self.tokens.numpy(), sentinel), "offsets": self.offsets.numpy(),
                           "rows": self.rows.numpy()}
        return self._numpy

    def _gathered_lists(self, tokens: torch.Tensor, weights: torch.Tensor, budget: int) -> tuple[np.ndarray, np.ndarray]:
        """``(start, end)`` posting positions of every list the candidate set gathers.

        Without a ``budget`` those are the lists ``offsets[t] : offsets[t+1]`` of every query token
        the index holds, found by binary search; with one, the spans :meth:`_plan` gathers.
        """
        arrays = self._arrays()
        if budget:
            gathered, _ = self._plan(tokens, weights, budget)
            spans = np.asarray([span[:2] for span in gathered], dtype=np.int64).reshape(-1, 2)
            return spans[:, 0], spans[:, 1]
        # in token order, so that a nested finest token's lists follow row order
        wanted = np.sort(tokens.numpy())
        slot = np.searchsorted(arrays["tokens"], wanted)
        slot = slot[arrays["tokens"][slot] == wanted]
        return arrays["offsets"][slot], arrays["offsets"][slot + 1]

    def _rerank_all(self, start, end, k, entity_type, query_vector, vectors) -> tuple[torch.Tensor, torch.Tensor]:
        """Rank the rows of every gathered posting by embedding score ``⟨u, v_e⟩``; the best ``k``.

        When the lists are pairwise disjoint runs of consecutive rows ``r₀ … r₀ + n − 1`` (an IVF
        layout, the rows stored in list order, as the finest nested token gives) no row repeats:
        lists holding on average at least :data:`RUN_ROWS` rows are each multiplied in place,
        ``vectors[r₀ : r₀ + n] · u``, shorter ones gathered into one matrix product. Otherwise the
        postings' rows are gathered; as a row occurs at most once per list, the best
        ``k × lists`` postings then hold at least ``k`` distinct rows and only those are
        de-duplicated (each row keeps its first, best, place).
        """
        arrays, matrix = self._arrays(), vectors.numpy()
        query = query_vector.to(vectors.dtype).numpy()
        length = end - start
        first_row, last_row = arrays["rows"][start], arrays["rows"][end - 1]
        # array methods, not np.all & co: a query runs a few dozen small operations, their call cost counts
        runs = start.size > 0 and bool((last_row - first_row == length - 1).all())
        if runs and not bool((first_row[1:] > last_row[:-1]).all()):
            order = np.argsort(first_row)
            first_row, last_row, length = first_row[order], last_row[order], length[order]
            runs = bool((first_row[1:] > last_row[:-1]).all())
        if runs and int(length.sum()) >= RUN_ROWS * start.size:
            rows = _ranges(first_row, length)
            dots = np.concatenate([matrix[r:r + n] @ query for r, n in zip(first_row.tolist(), length.tolist())])
        else:
            rows = _ranges(first_row, length) if runs else arrays["rows"][_ranges(start, length)]
            dots = np.take(matrix, rows, axis=0) @ query
        if entity_type is not None:
            wanted = self.type_mask(entity_type).numpy()[rows]
            rows, dots = rows[wanted], dots[wanted]
        keep = min(k if runs else k * max(start.size, 1), rows.size)
        best = (-dots).argpartition(keep - 1)[:keep] if 0 < keep < rows.size else np.arange(keep)
        best = best[(-dots[best]).argsort(kind="stable")]
        top, values = rows[best], dots[best]
        if not runs and start.size > 1:
            _, once = np.unique(top, return_index=True)
            once.sort()
            top, values = top[once], values[once]
        return torch.from_numpy(top[:k].astype(np.int64, copy=False)), torch.from_numpy(values[:k])

    def explain(self, tokens: torch.Tensor, weights: torch.Tensor, row: int) -> list[tuple[int, float]]:
        """The query tokens that match entity ``row`` with their contributions ``q_t · w(t, e)``, largest first."""
        positions, query_index = self.postings(tokens)
        hit = self.rows[positions] == row
        contrib = weights.float()[query_index[hit]] * self.weights[positions[hit]]
        pairs = sorted(zip(tokens[query_index[hit]].tolist(), contrib.tolist()), key=lambda p: -p[1])
        return pairs

    def bag(self, row: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens and weights indexed for entity ``row`` (a full scan; for inspection)."""
        hit = (self.rows == row).nonzero().squeeze(1)
        token_of = torch.searchsorted(self.offsets, hit, right=True) - 1
        return self.tokens[token_of], self.weights[hit]
