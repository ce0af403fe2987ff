"""RAPTOR's collapsed tree with one summary level: Ward agglomerative clustering of the claim
embeddings (corpus-wide, about `raptor_cluster_size` claims per cluster: not stated in the
paper), one LLM summary per cluster of two or more claims. Summaries and leaves are retrieved
together (srb.theoria.retrieve)."""

from __future__ import annotations

import hashlib
import json
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from srb.theoria.db import TheoriaDB, to_blob
from srb.theoria.models import EndpointModels
from srb.theoria.options import TheoriaOptions

SUMMARY_PROMPT = """Summarise these related scientific claims in at most three sentences. Keep
every number, condition and named intervention; do not add anything they do not say.

{claims}

Summary:"""


def ward_clusters(vectors: np.ndarray, n_clusters: int) -> np.ndarray:
    """Cluster labels 1..n (scipy's Ward linkage, deterministic)."""
    from scipy.cluster.hierarchy import fcluster, linkage

    if len(vectors) < 2:
        return np.ones(len(vectors), dtype=int)
    tree = linkage(vectors.astype(np.float64), method="ward")
    return fcluster(tree, t=max(1, n_clusters), criterion="maxclust")


def summary_id(children: list[str]) -> str:
    return "rs-" + hashlib.sha256("\0".join(sorted(children)).encode()).hexdigest()[:16]


def build_raptor(db: TheoriaDB, models: EndpointModels, opts: TheoriaOptions) -> int:
    """Replace the summary level with one built over every claim; returns summaries written."""
    ids, vectors = db.evidence_vectors()
    if len(ids) < 2:
        return 0
    labels = ward_clusters(vectors, math.ceil(len(ids) / opts.raptor_cluster_size))
    rows = {r[0]: (r[1], r[2]) for r in db.query("SELECT id, paper_id, text FROM evidence")}
    groups: dict[int, list[str]] = {}
    for cid, label in zip(ids, labels, strict=True):
        groups.setdefault(int(label), []).append(cid)
    clusters = [sorted(g) for _, g in sorted(groups.items()) if len(g) >= 2]

    def summarise(members: list[str]) -> str:
        listing = "\n".join(f"- {rows[m][1]}" for m in members)
        return models.chat_text(SUMMARY_PROMPT.format(claims=listing), 200).strip()

    with ThreadPoolExecutor(max(1, opts.concurrency)) as pool:
        texts = list(pool.map(summarise, clusters))
    kept = [(m, t) for m, t in zip(clusters, texts, strict=True) if t]
    vecs = models.embed([t for _, t in kept]) if kept else np.zeros((0, 0))
    with db.transaction() as conn:
        conn.execute("DELETE FROM raptor")
        for (members, text), v in zip(kept, vecs, strict=True):
            counts: dict[str, int] = {}
            for m in members:
                counts[rows[m][0]] = counts.get(rows[m][0], 0) + 1
            papers = sorted(counts, key=lambda p: (-counts[p], p))
            conn.execute(
                "INSERT INTO raptor VALUES (?, 1, ?, ?, ?, ?)",
                (summary_id(members), text, json.dumps(members), json.dumps(papers), to_blob(v)),
            )
    return len(kept)
