"""Theoria's ingest, in bulk (the workflow's grid) and incrementally (POST /observe).

Bulk: every paper's claims are extracted and embedded (`add_paper`, papers concurrently), then
`finish` builds the layers over the whole corpus: links, the RAPTOR summaries, communities and
theories (Theoria), or links and RAPTOR only (Prism). Observe: one paper (or finding) at a time;
its claims are linked to what is already stored, assigned to the nearest communities (rebuilt
when the store grew by `recluster_growth`), and update or seed theories. Each step commits in
one transaction; extraction calls are the same requests in both paths, so the cache serves one
from the other.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from srb.data.schema import Paper
from srb.theoria.communities import assign_items, build_communities
from srb.theoria.db import TheoriaDB, to_blob, write_bm25, write_faiss
from srb.theoria.extract import PaperExtraction, extract_paper
from srb.theoria.links import discover_links
from srb.theoria.models import EndpointModels
from srb.theoria.options import TheoriaOptions
from srb.theoria.raptor import build_raptor
from srb.theoria.theories import reanchor_theories, theory_counts, theory_id, update_theories

THEORIA_LAYERS = ("links", "raptor", "communities", "theories")
PRISM_LAYERS = ("links", "raptor")


def add_paper(
    db: TheoriaDB, models: EndpointModels, opts: TheoriaOptions, paper: Paper, batch: int = 0
) -> PaperExtraction:
    """Extract and embed one paper's claims and store them (replacing any earlier attempt)."""
    extraction = extract_paper(paper, models, opts)
    vectors = models.embed([c.text for c in extraction.claims])
    with db.transaction() as conn:
        _delete_paper(conn, paper.id)
        conn.execute(
            "INSERT INTO papers VALUES (?, ?, ?, ?, ?, ?)",
            (
                paper.id,
                len(paper.text),
                extraction.chunks,
                extraction.passes,
                "\n".join(extraction.failed_passes),
                batch,
            ),
        )
        for local, (c, v) in enumerate(zip(extraction.claims, vectors, strict=True)):
            conn.execute(
                "INSERT INTO evidence VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    c.claim_id,
                    c.paper_id,
                    c.aspect,
                    c.chunk,
                    c.text,
                    c.start,
                    c.end,
                    batch,
                    local,
                    to_blob(v),
                ),
            )
    return extraction


def _delete_paper(conn: Any, paper_id: str) -> None:
    """Remove a paper and everything derived from its claims, so that observing it again (a
    resumed /observe, a retried ingest) counts each claim once: the theories its claims seeded
    go, and the support or contradiction they gave other theories is taken back."""
    ids = [r[0] for r in conn.execute("SELECT id FROM evidence WHERE paper_id = ?", (paper_id,))]
    for iid in ids:
        for tid, stance in conn.execute(
            "SELECT theory_id, stance FROM theory_evidence WHERE item_id = ?", (iid,)
        ).fetchall():
            column = "contradict" if stance == "contradicts" else "support"
            conn.execute(f"UPDATE theories SET {column} = {column} - 1 WHERE id = ?", (tid,))
        seeded = theory_id(iid)
        conn.execute("DELETE FROM theory_evidence WHERE theory_id = ?", (seeded,))
        conn.execute("DELETE FROM theories WHERE id = ?", (seeded,))
        conn.execute("DELETE FROM links WHERE src = ? OR dst = ?", (iid, iid))
        conn.execute("DELETE FROM link_decisions WHERE src = ?", (iid,))
        conn.execute("DELETE FROM membership WHERE item_id = ?", (iid,))
        conn.execute("DELETE FROM theory_evidence WHERE item_id = ?", (iid,))
    conn.execute("DELETE FROM evidence WHERE paper_id = ?", (paper_id,))
    conn.execute("DELETE FROM papers WHERE paper_id = ?", (paper_id,))


def forget_paper(db: TheoriaDB, paper_id: str) -> None:
    with db.transaction() as conn:
        _delete_paper(conn, paper_id)


def finish(
    db: TheoriaDB, models: EndpointModels, opts: TheoriaOptions, layers: tuple[str, ...]
) -> dict[str, Any]:
    """Build `layers` over everything stored (bulk ingest's last step); returns its counts."""
    started = time.perf_counter()
    report: dict[str, Any] = {}
    all_ids = [e.id for e in db.evidence()]
    if "links" in layers:
        report["links"] = discover_links(db, models, opts, all_ids)
    if "raptor" in layers:
        report["summaries"] = build_raptor(db, models, opts)
    if "communities" in layers:
        report["communities"] = build_communities(db, opts)
    if "theories" in layers:
        report["theory_events"] = update_theories(db, models, opts, all_ids, batch=0)
    write_faiss(db)
    report["bm25"] = write_bm25(db, opts.bm25_k1, opts.bm25_b)
    with db.transaction() as conn:
        db.set_meta(conn, "layers", list(layers))
        db.set_meta(conn, "options", asdict(opts))
    report["counts"] = db.counts()
    report["seconds"] = round(time.perf_counter() - started, 3)
    return report


def observe(
    db: TheoriaDB, models: EndpointModels, opts: TheoriaOptions, paper: Paper, batch: int
) -> dict[str, Any]:
    """Take one new paper (or finding) into a live store, updating every layer."""
    # the paper's own earlier claims (a resumed observe) are replaced, so they count as new
    before = {e.id for e in db.evidence() if e.paper_id != paper.id}
    extraction = add_paper(db, models, opts, paper, batch)
    new = [c.claim_id for c in extraction.claims if c.claim_id not in before]
    links = discover_links(db, models, opts, new)
    summaries = build_raptor(db, models, opts)
    built_at = int(db.get_meta("communities_built_at", 0) or 0)
    total = len(before) + len(new)
    if built_at == 0 or total >= built_at * (1 + opts.recluster_growth):
        communities = build_communities(db, opts)
        reanchor_theories(db)
        rebuilt = True
    else:
        ids, vectors = db.evidence_vectors(new)
        assign_items(db, ids, vectors)
        communities, rebuilt = {}, False
    events = update_theories(db, models, opts, new, batch)
    write_faiss(db)
    write_bm25(db, opts.bm25_k1, opts.bm25_b)
    return {
        "paper_id": paper.id,
        "batch": batch,
        "claims": len(new),
        "failed_passes": extraction.failed_passes,
        "links": links,
        "summaries": summaries,
        "communities_rebuilt": rebuilt,
        "communities": communities,
        "theory_events": events,
        "theories": theory_counts(db),
    }
