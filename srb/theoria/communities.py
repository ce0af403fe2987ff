"""The community layer: a kNN graph of evidence items, Leiden at two resolutions (coarse and
fine), soft membership = cosine to the fine community's centroid, and community-to-community
edges = how many kNN edges join two fine communities (the paper states none of these
constants; they are options)."""

from __future__ import annotations

import numpy as np

from srb.theoria.db import TheoriaDB, from_blob, to_blob
from srb.theoria.options import TheoriaOptions


def knn_edges(vectors: np.ndarray, k: int, min_cosine: float) -> dict[tuple[int, int], float]:
    """Undirected edges to each item's k nearest (cosine >= floor), weight = cosine."""
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    edges: dict[tuple[int, int], float] = {}
    for i in range(len(vectors)):
        for j in np.argsort(-sims[i], kind="stable")[:k]:
            if sims[i, j] >= min_cosine:
                a, b = (i, int(j)) if i < j else (int(j), i)
                edges[(a, b)] = float(sims[i, j])
    return edges


def leiden(n: int, edges: dict[tuple[int, int], float], resolution: float, seed: int) -> list[int]:
    import igraph as ig
    import leidenalg

    graph = ig.Graph(n=n, edges=list(edges), directed=False)
    weights = list(edges.values())
    partition = leidenalg.find_partition(
        graph,
        leidenalg.RBConfigurationVertexPartition,
        weights=weights if weights else None,
        resolution_parameter=resolution,
        seed=seed,
    )
    return [int(m) for m in partition.membership]


def _centroid(vectors: np.ndarray) -> np.ndarray:
    c = vectors.mean(axis=0)
    norm = np.linalg.norm(c)
    return (c / norm if norm else c).astype(np.float32)


def build_communities(db: TheoriaDB, opts: TheoriaOptions) -> dict[str, int]:
    """Replace the community layer with one computed over every evidence item."""
    ids, vectors = db.evidence_vectors()
    if not ids:
        return {"coarse": 0, "fine": 0, "edges": 0}
    edges = knn_edges(vectors, opts.knn_k, opts.knn_min_cosine)
    coarse = leiden(len(ids), edges, opts.coarse_resolution, opts.leiden_seed)
    fine = leiden(len(ids), edges, opts.fine_resolution, opts.leiden_seed)
    with db.transaction() as conn:
        for table in ("communities", "membership", "community_edges"):
            conn.execute(f"DELETE FROM {table}")
        for c in sorted(set(coarse)):
            members = [i for i, m in enumerate(coarse) if m == c]
            conn.execute(
                "INSERT INTO communities VALUES (?, 'coarse', NULL, ?, ?)",
                (f"c{c}", len(members), to_blob(_centroid(vectors[members]))),
            )
        for f in sorted(set(fine)):
            members = [i for i, m in enumerate(fine) if m == f]
            parents = [coarse[i] for i in members]
            parent = max(sorted(set(parents)), key=parents.count)
            centroid = _centroid(vectors[members])
            conn.execute(
                "INSERT INTO communities VALUES (?, 'fine', ?, ?, ?)",
                (f"f{f}", f"c{parent}", len(members), to_blob(centroid)),
            )
            for i in members:
                conn.execute(
                    "INSERT INTO membership VALUES (?, ?, ?)",
                    (ids[i], f"f{f}", float(vectors[i] @ centroid)),
                )
        between: dict[tuple[str, str], float] = {}
        for a, b in edges:
            fa, fb = f"f{fine[a]}", f"f{fine[b]}"
            if fa != fb:
                key = (fa, fb) if fa < fb else (fb, fa)
                between[key] = between.get(key, 0.0) + 1.0
        for (a, b), w in sorted(between.items()):
            conn.execute("INSERT INTO community_edges VALUES (?, ?, ?)", (a, b, w))
        db.set_meta(conn, "communities_built_at", len(ids))
    return {"coarse": len(set(coarse)), "fine": len(set(fine)), "edges": len(between)}


def fine_centroids(db: TheoriaDB) -> tuple[list[str], np.ndarray]:
    rows = db.query("SELECT id, centroid FROM communities WHERE level = 'fine' ORDER BY id")
    if not rows:
        return [], np.zeros((0, 0), dtype=np.float32)
    return [r[0] for r in rows], np.vstack([from_blob(r[1]) for r in rows])


def neighbours(db: TheoriaDB, communities: list[str]) -> list[str]:
    """Fine communities joined by an edge to any of `communities` (not those themselves)."""
    chosen = set(communities)
    out: set[str] = set()
    for a, b in db.query("SELECT a, b FROM community_edges"):
        if a in chosen and b not in chosen:
            out.add(b)
        if b in chosen and a not in chosen:
            out.add(a)
    return sorted(out)


def top_communities(db: TheoriaDB, vector: np.ndarray, n: int) -> list[str]:
    ids, centroids = fine_centroids(db)
    if not ids:
        return []
    sims = centroids @ vector
    return [ids[i] for i in np.argsort(-sims, kind="stable")[:n]]


def assign_items(db: TheoriaDB, ids: list[str], vectors: np.ndarray) -> None:
    """Incremental assignment (observe): each new item joins its nearest fine community, whose
    centroid and size are updated; the graph is rebuilt only by `build_communities`."""
    cids, centroids = fine_centroids(db)
    if not cids:
        return
    sizes = dict(db.query("SELECT id, size FROM communities WHERE level = 'fine'"))
    centroids = centroids.copy()
    with db.transaction() as conn:
        for item, v in zip(ids, vectors, strict=True):
            j = int(np.argmax(centroids @ v))
            n = sizes[cids[j]]
            moved = centroids[j] * n + v
            centroids[j] = moved / (np.linalg.norm(moved) or 1.0)
            sizes[cids[j]] = n + 1
            conn.execute(
                "INSERT OR REPLACE INTO membership VALUES (?, ?, ?)",
                (item, cids[j], float(v @ centroids[j])),
            )
        for cid, c in zip(cids, centroids, strict=True):
            conn.execute(
                "UPDATE communities SET size = ?, centroid = ? WHERE id = ?",
                (sizes[cid], to_blob(c), cid),
            )
