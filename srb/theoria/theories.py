"""The theory layer: statements anchored to fine communities, with low / medium / high
confidence promoted by supporting and demoted by contradicting evidence.

For each new evidence item (in order): the candidates are the theories anchored to its top
`route_communities` fine communities and their graph neighbours; the best candidate above
`match_cosine` (the paper's 0.25) takes the item as support, or as contradiction when the item
has a `contradicts` link to evidence the theory already holds (the paper does not say how a
contradiction is detected; the links layer's disambiguator is the one place that decides it).
With no match, an item below `dedup_cosine` (0.80) to every theory seeds a new one; one above
it supports that near-duplicate instead. A seeded theory's statement is written by the LLM
(a general claim the finding supports), after the batch's decisions, which depend only on
embeddings, so the statements can be asked concurrently.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor

from srb.theoria.communities import neighbours, top_communities
from srb.theoria.db import TheoriaDB, from_blob, to_blob
from srb.theoria.models import EndpointModels
from srb.theoria.options import CONFIDENCE, TheoriaOptions

THEORY_PROMPT = """A study reports this finding:
{finding}

State in one sentence the general scientific claim this finding is evidence for (a belief that
other studies could support or contradict). Do not mention this particular study."""


def confidence(support: int, contradict: int, opts: TheoriaOptions) -> str:
    level = int(support >= opts.medium_support) + int(support >= opts.high_support)
    level -= contradict // max(1, opts.demote_contradictions)
    return CONFIDENCE[max(0, min(2, level))]


def theory_id(item_id: str) -> str:
    return "th-" + hashlib.sha256(item_id.encode()).hexdigest()[:16]


def _contradicts(db: TheoriaDB, item: str, theory: str) -> bool:
    rows = db.query(
        "SELECT 1 FROM links l JOIN theory_evidence t ON t.theory_id = ? "
        "WHERE l.relation = 'contradicts' AND ((l.src = ? AND l.dst = t.item_id) "
        "OR (l.dst = ? AND l.src = t.item_id)) LIMIT 1",
        (theory, item, item),
    )
    return bool(rows)


def update_theories(
    db: TheoriaDB, models: EndpointModels, opts: TheoriaOptions, item_ids: list[str], batch: int
) -> dict[str, int]:
    """Apply the match rules to `item_ids` in order; returns event counts."""
    ids, vectors = db.evidence_vectors(item_ids)
    texts = dict(db.query("SELECT id, text FROM evidence"))
    order = {i: n for n, i in enumerate(item_ids)}
    pairs = sorted(zip(ids, vectors, strict=True), key=lambda p: order[p[0]])
    counts = {"seeded": 0, "supported": 0, "contradicted": 0, "promoted": 0, "demoted": 0}
    seeded: list[tuple[str, str]] = []
    with db.transaction() as conn:
        rows = conn.execute(
            "SELECT id, community_id, support, contradict, confidence, embedding FROM theories "
            "ORDER BY id"
        ).fetchall()
        theories = {r[0]: [r[1], r[2], r[3], r[4], from_blob(r[5])] for r in rows}
        for item, v in pairs:
            tops = top_communities(db, v, opts.route_communities)
            anchored = set(tops) | set(neighbours(db, tops))
            cands = [t for t, th in theories.items() if th[0] in anchored]
            best, best_cos = None, -1.0
            for t in cands:
                cos = float(theories[t][4] @ v)
                if cos > best_cos:
                    best, best_cos = t, cos
            if best is None or best_cos <= opts.match_cosine:
                near = [(float(th[4] @ v), t) for t, th in theories.items()]
                top = max(near) if near else (-1.0, None)
                if top[1] is not None and top[0] >= opts.dedup_cosine:
                    best = top[1]
                else:
                    tid = theory_id(item)
                    anchor = tops[0] if tops else "f-none"
                    theories[tid] = [anchor, 1, 0, confidence(1, 0, opts), v]
                    conn.execute(
                        "INSERT OR REPLACE INTO theories VALUES (?, ?, ?, 1, 0, ?, ?, ?)",
                        (tid, anchor, texts[item], theories[tid][3], batch, to_blob(v)),
                    )
                    conn.execute(
                        "INSERT OR REPLACE INTO theory_evidence VALUES (?, ?, 'supports')",
                        (tid, item),
                    )
                    conn.execute(
                        "INSERT INTO theory_events VALUES (?, ?, 'seeded', NULL, ?)",
                        (batch, tid, theories[tid][3]),
                    )
                    seeded.append((tid, texts[item]))
                    counts["seeded"] += 1
                    continue
            th = theories[best]
            stance = "contradicts" if _contradicts(db, item, best) else "supports"
            if stance == "supports":
                th[1] += 1
                counts["supported"] += 1
            else:
                th[2] += 1
                counts["contradicted"] += 1
            before, th[3] = th[3], confidence(th[1], th[2], opts)
            conn.execute(
                "UPDATE theories SET support = ?, contradict = ?, confidence = ? WHERE id = ?",
                (th[1], th[2], th[3], best),
            )
            conn.execute(
                "INSERT OR REPLACE INTO theory_evidence VALUES (?, ?, ?)", (best, item, stance)
            )
            if before != th[3]:
                event = (
                    "promoted" if CONFIDENCE.index(th[3]) > CONFIDENCE.index(before) else "demoted"
                )
                counts[event] += 1
                conn.execute(
                    "INSERT INTO theory_events VALUES (?, ?, ?, ?, ?)",
                    (batch, best, event, before, th[3]),
                )

    def state(job: tuple[str, str]) -> str:
        return models.chat_text(THEORY_PROMPT.format(finding=job[1]), 96).strip()

    with ThreadPoolExecutor(max(1, opts.concurrency)) as pool:
        statements = list(pool.map(state, seeded))
    with db.transaction() as conn:
        for (tid, finding), statement in zip(seeded, statements, strict=True):
            conn.execute(
                "UPDATE theories SET statement = ? WHERE id = ?", (statement or finding, tid)
            )
    return counts


def reanchor_theories(db: TheoriaDB) -> None:
    """After the communities are rebuilt, anchor every theory to its nearest fine community."""
    rows = db.query("SELECT id, embedding FROM theories")
    with db.transaction() as conn:
        for tid, blob in rows:
            tops = top_communities(db, from_blob(blob), 1)
            if tops:
                conn.execute("UPDATE theories SET community_id = ? WHERE id = ?", (tops[0], tid))


def theories_by_community(db: TheoriaDB, min_confidence: str | None) -> dict[str, list[dict]]:
    """The theory table grouped by community (GET /theories), strongest first."""
    floor = CONFIDENCE.index(min_confidence) if min_confidence else 0
    rows = db.query(
        "SELECT id, community_id, statement, support, contradict, confidence FROM theories "
        "ORDER BY community_id, support DESC, id"
    )
    out: dict[str, list[dict]] = {}
    for tid, cid, statement, sup, con, conf in rows:
        if CONFIDENCE.index(conf) >= floor:
            out.setdefault(cid, []).append(
                {
                    "id": tid,
                    "statement": statement,
                    "support": sup,
                    "contradict": con,
                    "confidence": conf,
                }
            )
    return out


def theory_counts(db: TheoriaDB) -> dict[str, int]:
    found = dict(db.query("SELECT confidence, COUNT(*) FROM theories GROUP BY confidence"))
    return {c: int(found.get(c, 0)) for c in CONFIDENCE}
