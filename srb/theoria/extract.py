"""The evidence layer's extraction: five passes per section-aware chunk, one aspect each.

Each pass asks for self-contained typed claims plus a verbatim quote; the quote is looked up in
the chunk, so a claim carries the exact characters it came from when the model quoted faithfully
(and `None`, not a guess, when it did not).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from srb.data.schema import Paper
from srb.theoria.models import EndpointModels, InvalidAnswer
from srb.theoria.options import TheoriaOptions
from srb.units import section_aware_spans

ASPECT_INSTRUCTIONS = {
    "numbers": "quantitative results: measured values, effect sizes, p-values, sample sizes, "
    "percentages, with what they measure",
    "mechanisms": "mechanisms and explanations: why or how an effect arises",
    "failures": "failures, negative or null results, adverse events, limitations",
    "conditions": "conditions: populations, doses, settings, durations and methods under which "
    "a result holds",
    "tables": "results reported in tables or table-like lists: each row's finding as a sentence",
}

#: The chunk comes first and the aspect last: the five passes over a chunk then share their
#: long prefix, which the model server's prefix cache computes once instead of five times.
EXTRACT_PROMPT = """Paper: {paper_id}
Text:
{chunk}

---
You extract evidence from the part of a scientific paper above.
Aspect: {aspect} -- {instruction}.
Write each claim as one self-contained sentence a reader understands without the paper (name the
intervention, outcome and population). For each claim also copy a short verbatim quote (at most
200 characters) from the text that supports it. Return at most {max_claims} claims; return an
empty list when the text has none of this aspect.
"""


def claims_schema(max_claims: int, max_chars: int, max_quote_chars: int = 300) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "claims": {
                "type": "array",
                "maxItems": max_claims,
                "items": {
                    "type": "object",
                    "properties": {
                        "claim": {"type": "string", "minLength": 10, "maxLength": max_chars},
                        "quote": {"type": "string", "maxLength": max_quote_chars},
                    },
                    "required": ["claim", "quote"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["claims"],
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class Claim:
    claim_id: str
    paper_id: str
    aspect: str
    chunk: int
    text: str
    start: int | None
    end: int | None


@dataclass
class PaperExtraction:
    paper_id: str
    chunks: int
    passes: int
    failed_passes: list[str]  # "chunk <i> <aspect>: <why>"
    claims: list[Claim]


def chunk_spans(text: str, chunk_chars: int) -> list[tuple[int, int]]:
    return section_aware_spans(text, chunk_chars)


_SPACE = re.compile(r"\s+")


def locate(quote: str, text: str, offset: int) -> tuple[int, int] | None:
    """Paper characters of `quote` inside `text` (which starts at `offset`): exact first, then
    ignoring case and runs of whitespace; None when the model did not quote verbatim."""
    quote = quote.strip()
    if len(quote) < 8:
        return None
    at = text.find(quote)
    if at >= 0:
        return offset + at, offset + at + len(quote)
    words = [re.escape(w) for w in _SPACE.split(quote) if w]
    m = re.search(r"\s+".join(words), text, flags=re.IGNORECASE)
    return (offset + m.start(), offset + m.end()) if m else None


def claim_id(paper_id: str, chunk: int, aspect: str, text: str) -> str:
    digest = hashlib.sha256(f"{paper_id}\0{chunk}\0{aspect}\0{text}".encode()).hexdigest()
    return "ev-" + digest[:16]


def _valid(max_chars: int) -> Any:
    def check(obj: dict[str, Any]) -> bool:
        claims = obj.get("claims")
        return isinstance(claims, list) and all(
            isinstance(c, dict) and isinstance(c.get("claim"), str) for c in claims
        )

    return check


def _passes(paper: Paper, opts: TheoriaOptions) -> Iterator[tuple[int, int, int, str]]:
    """Aspect-major (every chunk's first aspect, then every chunk's second, ...): a chunk's
    later passes start after its first has filled the prefix cache."""
    spans = chunk_spans(paper.text, opts.chunk_chars)
    for aspect in opts.aspects:
        for i, (s, e) in enumerate(spans):
            yield i, s, e, aspect


def extract_paper(paper: Paper, models: EndpointModels, opts: TheoriaOptions) -> PaperExtraction:
    """All passes of one paper, `opts.concurrency` calls in flight; claims in a fixed order
    (chunk, aspect, answer order), duplicates within the paper dropped."""
    passes = list(_passes(paper, opts))
    schema = claims_schema(opts.max_claims_per_pass, opts.max_claim_chars, opts.max_quote_chars)

    def run(p: tuple[int, int, int, str]) -> tuple[list[Claim], str | None]:
        i, s, e, aspect = p
        prompt = EXTRACT_PROMPT.format(
            aspect=aspect,
            instruction=ASPECT_INSTRUCTIONS[aspect],
            max_claims=opts.max_claims_per_pass,
            paper_id=paper.id,
            chunk=paper.text[s:e],
        )
        try:
            answer = models.chat_json(
                prompt,
                schema,
                "claims",
                opts.extraction_max_tokens,
                opts.retries,
                _valid(opts.max_claim_chars),
            )
        except InvalidAnswer as exc:
            return [], f"chunk {i} {aspect}: {exc}"
        out = []
        for c in answer["claims"]:
            text = " ".join(str(c["claim"]).split())[: opts.max_claim_chars]
            if len(text) < 10:
                continue
            span = locate(str(c.get("quote") or ""), paper.text[s:e], s)
            out.append(
                Claim(
                    claim_id(paper.id, i, aspect, text),
                    paper.id,
                    aspect,
                    i,
                    text,
                    span[0] if span else None,
                    span[1] if span else None,
                )
            )
        return out, None

    with ThreadPoolExecutor(max(1, opts.concurrency)) as pool:
        results = list(pool.map(run, passes))
    # claims in the paper's order (chunk, then aspect), whatever order the passes ran in
    aspect_rank = {a: n for n, a in enumerate(opts.aspects)}
    order = sorted(range(len(passes)), key=lambda n: (passes[n][0], aspect_rank[passes[n][3]]))
    results = [results[n] for n in order]
    claims: dict[str, Claim] = {}
    seen_text: set[str] = set()
    failed = []
    for found, error in results:
        if error:
            failed.append(error)
        for c in found:
            key = c.text.lower()
            if key not in seen_text:
                seen_text.add(key)
                claims[c.claim_id] = c
    return PaperExtraction(
        paper.id,
        len({p[0] for p in passes}),
        len(passes),
        failed,
        list(claims.values()),
    )
