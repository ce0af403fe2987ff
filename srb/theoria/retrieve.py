"""POST /retrieve: community-routed, entropy-weighted retrieval over the collapsed RAPTOR tree.

1. the query's top `route_communities` fine communities by cosine to their centroids, plus
   (optionally) their graph neighbours;
2. candidates: those communities' evidence items (leaves) and the summaries over any of them;
3. each RAPTOR level's cosines become a softmax (temperature `entropy_temperature`); a level
   whose distribution is peaked (low normalised entropy) is more informative, so its cosines
   weigh more: score = cosine x (1 - H/log n), with a floor so no level is silenced (the paper
   names the idea, not the formula);
4. with modality "hybrid", that ranking and the store's own BM25 ranking (its sparse vectors,
   over every item, not only the routed ones) are fused by RRF (k = `rrf_k`), each channel
   `hybrid_depth` deep, as the paper fuses its dense and sparse channels;
5. the top-k items after removing duplicate texts, then the one-hop linked items of those
   (from the typed links), which the paper's budgets overshoot by.

Prism has no communities: its candidates are every leaf and summary (`route=False`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from srb.retrieve import rrf
from srb.theoria.communities import neighbours, top_communities
from srb.theoria.db import TheoriaDB
from srb.theoria.options import TheoriaOptions

LEVEL_FLOOR = 0.1


@dataclass(frozen=True)
class Retrieved:
    item_id: str
    text: str
    paper_ids: tuple[str, ...]
    kind: str  # claim aspect, "summary", or "linked:<relation>"
    score: float
    span: tuple[int, int] | None


def level_weight(cosines: np.ndarray, temperature: float) -> float:
    """1 - normalised entropy of softmax(cosines / T), floored; 1 for a single candidate."""
    n = len(cosines)
    if n <= 1:
        return 1.0
    z = (cosines - cosines.max()) / temperature
    p = np.exp(z) / np.exp(z).sum()
    h = float(-(p * np.log(np.clip(p, 1e-12, None))).sum())
    return max(LEVEL_FLOOR, 1.0 - h / float(np.log(n)))


def retrieve(
    db: TheoriaDB,
    query: np.ndarray,
    k: int,
    opts: TheoriaOptions,
    route: bool = True,
    expand: bool | None = None,
    lexical: list[tuple[str, float]] | None = None,
) -> list[Retrieved]:
    """The top-k items for a query vector; `lexical` (a BM25 ranking of item ids) makes it
    hybrid."""
    ev = {e.id: e for e in db.evidence()}
    summaries = {s.id: s for s in db.summaries()}
    leaf_ids, leaf_vecs = db.evidence_vectors()
    if not leaf_ids:
        return []
    chosen: set[str] | None = None
    if route:
        tops = top_communities(db, query, opts.route_communities)
        if tops:
            if opts.expand_neighbours if expand is None else expand:
                tops = [*tops, *neighbours(db, tops)]
            placeholders = ",".join("?" * len(tops))
            chosen = {
                r[0]
                for r in db.query(
                    f"SELECT item_id FROM membership WHERE community_id IN ({placeholders})", tops
                )
            }
    keep = [i for i, cid in enumerate(leaf_ids) if chosen is None or cid in chosen]
    scored: list[tuple[float, str]] = []
    if keep:
        cos = leaf_vecs[keep] @ query
        w = level_weight(cos, opts.entropy_temperature)
        scored += [(w * float(c), leaf_ids[i]) for i, c in zip(keep, cos, strict=True)]
    sum_ids, sum_vecs = db.summary_vectors()
    keep_s = [
        i
        for i, sid in enumerate(sum_ids)
        if chosen is None or any(c in chosen for c in summaries[sid].children)
    ]
    if keep_s:
        cos = sum_vecs[keep_s] @ query
        w = level_weight(cos, opts.entropy_temperature)
        scored += [(w * float(c), sum_ids[i]) for i, c in zip(keep_s, cos, strict=True)]
    scored.sort(key=lambda p: (-p[0], p[1]))
    if lexical is not None:
        depth = max(k, opts.hybrid_depth)
        dense = [(iid, score) for score, iid in scored[:depth]]
        fused = rrf([dense, lexical[:depth]], k=opts.rrf_k)
        scored = [(score, iid) for iid, score in fused]
    out: list[Retrieved] = []
    seen: set[str] = set()
    for score, iid in scored:
        if len(out) >= k:
            break
        item = _item(iid, score, ev, summaries)
        key = " ".join(item.text.lower().split())
        if key in seen:
            continue
        seen.add(key)
        out.append(item)
    taken = {r.item_id for r in out}
    linked: list[Retrieved] = []
    for r in list(out):
        for other, relation in _linked(db, r.item_id):
            if other not in taken and other in ev:
                taken.add(other)
                e = ev[other]
                span = (e.start, e.end) if e.start is not None and e.end is not None else None
                linked.append(
                    Retrieved(other, e.text, (e.paper_id,), f"linked:{relation}", 0.0, span)
                )
    return out + linked


def _item(iid: str, score: float, ev: dict, summaries: dict) -> Retrieved:
    if iid in ev:
        e = ev[iid]
        span = (e.start, e.end) if e.start is not None and e.end is not None else None
        return Retrieved(iid, e.text, (e.paper_id,), e.aspect, score, span)
    s = summaries[iid]
    return Retrieved(iid, s.text, s.paper_ids, "summary", score, None)


def _linked(db: TheoriaDB, item: str) -> list[tuple[str, str]]:
    rows = db.query(
        "SELECT dst, relation FROM links WHERE src = ? UNION "
        "SELECT src, relation FROM links WHERE dst = ? ORDER BY 1",
        (item, item),
    )
    return [(r[0], r[1]) for r in rows]


__all__ = ["retrieve", "Retrieved", "level_weight"]
