"""Every choice the paper leaves open ("not stated" in the spec), in one place and in config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from srb.errors import ConfigError

ASPECTS = ("numbers", "mechanisms", "failures", "conditions", "tables")
RELATIONS = ("supports", "contradicts", "extends", "depends-on")
CONFIDENCE = ("low", "medium", "high")


@dataclass(frozen=True)
class TheoriaOptions:
    #: section-aware chunks of about this many characters (the paper's ~6K)
    chunk_chars: int = 6000
    #: the five extraction passes per chunk, one aspect each
    aspects: tuple[str, ...] = ASPECTS
    #: claims one pass may return (bounds a small model's run-away lists)
    max_claims_per_pass: int = 8
    #: longest claim, in characters
    max_claim_chars: int = 400
    #: longest supporting quote, in characters (the prompt asks for at most 200). With the
    #: claim bounds it caps an answer's length: set them so the fullest answer fits
    #: `extraction_max_tokens` (about 3.5 characters a token), or full answers are cut, fail to
    #: parse and are asked again at the same length
    max_quote_chars: int = 300
    #: completion budget of one extraction answer
    extraction_max_tokens: int = 1024
    #: bounded retries of an unparseable extraction or decision answer
    retries: int = 2
    #: model calls in flight at once during ingest (the server batches them)
    concurrency: int = 4
    #: RAPTOR: Ward clusters of about this many claims, one summary each (corpus-wide)
    raptor_cluster_size: int = 8
    #: links: each claim's nearest claims of *other* papers put to the disambiguator ...
    link_neighbours: int = 5
    #: ... when at least this similar (the paper's 1,275 links from 26,782 items are rare)
    link_min_cosine: float = 0.6
    #: community layer: kNN graph of evidence items
    knn_k: int = 10
    knn_min_cosine: float = 0.2
    #: Leiden (RB configuration) resolutions of the coarse and fine partitions
    coarse_resolution: float = 0.5
    fine_resolution: float = 2.0
    leiden_seed: int = 42
    #: /observe: rebuild the communities when the evidence grew by this share since the last
    #: build (new items otherwise join their nearest community)
    recluster_growth: float = 0.5
    #: /retrieve: fine communities routed to, and whether their graph neighbours join
    route_communities: int = 5
    expand_neighbours: bool = True
    #: /retrieve with modality "hybrid": the stored BM25 vectors' parameters (the workflow's
    #: `bm25` defaults), RRF's k, and how deep each channel ranks before fusion
    bm25_k1: float = 0.9
    bm25_b: float = 0.4
    rrf_k: int = 60
    hybrid_depth: int = 100
    #: temperature of the per-level softmax whose entropy weights each RAPTOR level
    entropy_temperature: float = 0.05
    #: theory layer (the paper's thresholds)
    match_cosine: float = 0.25
    dedup_cosine: float = 0.80
    #: support counts promoting to medium / high; contradictions demoting one level each
    medium_support: int = 3
    high_support: int = 6
    demote_contradictions: int = 2
    #: /observe: longest finding accepted, in characters (a whole paper is one finding)
    max_finding_chars: int = 400_000
    #: Prism's answers: completion budget of its internal synthesis
    answer_max_tokens: int = 256

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None) -> TheoriaOptions:
        """Options from config `memory.theoria`; unknown keys are an error, not ignored."""
        section = dict(section or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise ConfigError(
                f"memory.theoria: unknown option(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        if "aspects" in section:
            section["aspects"] = tuple(section["aspects"])
            bad = [a for a in section["aspects"] if a not in ASPECTS]
            if bad:
                raise ConfigError(f"memory.theoria.aspects: unknown aspect(s) {bad}; {ASPECTS}")
        opts = cls(**section)
        if not 0 < opts.match_cosine < opts.dedup_cosine <= 1:
            raise ConfigError("memory.theoria: need 0 < match_cosine < dedup_cosine <= 1")
        if not opts.medium_support <= opts.high_support:
            raise ConfigError("memory.theoria: medium_support must not exceed high_support")
        return opts
