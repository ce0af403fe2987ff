"""Typed cross-document links: each new claim's nearest claims of *other* papers go to an LLM
disambiguator that names a relation or "none"; typed relations become rows of `links`.

Choices the paper leaves open (options): only other papers' claims are candidates (the paper
calls the links cross-document), at most `link_neighbours` of them and only those at least
`link_min_cosine` similar (without a floor every claim would cost a call); the answer has an
explicit "none". A claim whose answer never parses is recorded as `invalid` in
`link_decisions` and counted; it is not retried on resume, so a resumed ingest sends the same
requests as an uninterrupted one.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from srb.theoria.db import ORDER, TheoriaDB
from srb.theoria.models import EndpointModels, InvalidAnswer
from srb.theoria.options import RELATIONS, TheoriaOptions

log = logging.getLogger(__name__)

LINK_PROMPT = """Decide how a new scientific claim relates to each earlier claim from other papers.
Relations: supports (agrees with or confirms it), contradicts (reports the opposite or an
incompatible result), extends (adds to it under new conditions), depends-on (only holds if it
holds), none (unrelated or merely on the same topic).

New claim: {claim}

Earlier claims:
{candidates}

Answer with one relation for every earlier claim, by its number."""


def link_schema(n: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "relations": {
                "type": "array",
                "minItems": n,
                "maxItems": n,
                "items": {
                    "type": "object",
                    "properties": {
                        "number": {"type": "integer", "minimum": 1, "maximum": n},
                        "relation": {"type": "string", "enum": [*RELATIONS, "none"]},
                    },
                    "required": ["number", "relation"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["relations"],
        "additionalProperties": False,
    }


def candidates_for(
    ids: list[str],
    papers: list[str],
    vectors: np.ndarray,
    new: list[str],
    opts: TheoriaOptions,
) -> dict[str, list[tuple[str, float]]]:
    """For each new claim, its nearest claims of other papers above the floor, best first."""
    pos = {cid: i for i, cid in enumerate(ids)}
    paper_of = np.array(papers)
    out: dict[str, list[tuple[str, float]]] = {}
    for cid in new:
        i = pos[cid]
        sims = vectors @ vectors[i]
        sims[paper_of == papers[i]] = -np.inf
        order = np.argsort(-sims, kind="stable")[: opts.link_neighbours]
        out[cid] = [(ids[j], float(sims[j])) for j in order if sims[j] >= opts.link_min_cosine]
    return out


def discover_links(
    db: TheoriaDB, models: EndpointModels, opts: TheoriaOptions, new: list[str]
) -> dict[str, int]:
    """Links for the claims in `new` that have no decision yet; returns call outcome counts."""
    ids, vectors = db.evidence_vectors()
    if not ids:
        return {"decided": 0, "invalid": 0, "links": 0}
    papers = [r[0] for r in db.query(f"SELECT paper_id FROM evidence ORDER BY {ORDER}")]
    texts = dict(db.query("SELECT id, text FROM evidence"))
    done = {r[0] for r in db.query("SELECT src FROM link_decisions")}
    todo = [c for c in new if c not in done]
    cands = candidates_for(ids, papers, vectors, todo, opts)
    asks = [(c, cs) for c, cs in cands.items() if cs]

    def decide(job: tuple[str, list[tuple[str, float]]]) -> tuple[str, list[Any] | None]:
        cid, cs = job
        listing = "\n".join(f"{n}. {texts[d]}" for n, (d, _) in enumerate(cs, 1))
        try:
            answer = models.chat_json(
                LINK_PROMPT.format(claim=texts[cid], candidates=listing),
                link_schema(len(cs)),
                "links",
                64 + 24 * len(cs),
                opts.retries,
            )
        except InvalidAnswer as exc:
            log.warning("link decision for %s: %s", cid, exc)
            return cid, None
        return cid, list(answer.get("relations") or [])

    with ThreadPoolExecutor(max(1, opts.concurrency)) as pool:
        decisions = list(pool.map(decide, asks))
    n_links = n_invalid = 0
    with db.transaction() as conn:
        for cid, cs in cands.items():
            if not cs:
                conn.execute(
                    "INSERT OR REPLACE INTO link_decisions VALUES (?, 0, 'no-candidates')", (cid,)
                )
        for cid, relations in decisions:
            cs = cands[cid]
            if relations is None:
                n_invalid += 1
                conn.execute(
                    "INSERT OR REPLACE INTO link_decisions VALUES (?, ?, 'invalid')",
                    (cid, len(cs)),
                )
                continue
            conn.execute(
                "INSERT OR REPLACE INTO link_decisions VALUES (?, ?, 'decided')", (cid, len(cs))
            )
            for r in relations:
                n = int(r.get("number", 0))
                rel = r.get("relation")
                if 1 <= n <= len(cs) and rel in RELATIONS:
                    dst, cos = cs[n - 1]
                    conn.execute(
                        "INSERT OR REPLACE INTO links VALUES (?, ?, ?, ?)", (cid, dst, rel, cos)
                    )
                    n_links += 1
    return {"decided": len(decisions) - n_invalid, "invalid": n_invalid, "links": n_links}
