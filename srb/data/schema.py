"""Canonical records for papers and questions, and the validation every loader ends in.

Every corpus, whatever its source format, becomes these records before anything downstream
touches it, so retrieval, judging and analysis read one shape. Validation errors name the
file, the record and the field, because a user fixing a 2,000-question file needs all three.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from srb.errors import DataError  # defined at the bottom layer; loaders import it from here

# The direction labels a gold label may take (Evidence Inference's); srb.judge reads answers into
# the same three, so a question with any other label could never be answered correctly.
GOLD_LABELS = ("significantly increased", "significantly decreased", "no significant difference")

TIERS = ("L1", "L2", "L3")
QUESTION_TYPES = (
    "factual",
    "mechanistic",
    "quantitative",
    "enumeration",
    "conditional",
    "cross-document",
    "negative",
    "synthesis",
    "comparative",
)


@dataclass(frozen=True)
class EvidenceSpan:
    """A gold evidence passage as paper characters [start, end)."""

    paper_id: str
    start: int
    end: int


@dataclass(frozen=True)
class Paper:
    id: str
    title: str
    text: str
    source: str = ""
    licence: str = ""


@dataclass(frozen=True)
class Question:
    id: str
    question: str
    gold_answer: str
    must_have: tuple[str, ...]
    paper_ids: tuple[str, ...]
    tier: str = "L1"
    types: tuple[str, ...] = ()
    evidence: tuple[EvidenceSpan, ...] = ()
    gold_label: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Corpus:
    name: str
    papers: tuple[Paper, ...]
    questions: tuple[Question, ...]
    manifest: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def paper_index(self) -> dict[str, Paper]:
        return {p.id: p for p in self.papers}


def paper_to_dict(paper: Paper) -> dict[str, Any]:
    return asdict(paper)


def question_to_dict(q: Question) -> dict[str, Any]:
    d = asdict(q)
    d["must_have"] = list(q.must_have)
    d["paper_ids"] = list(q.paper_ids)
    d["types"] = list(q.types)
    d["evidence"] = [asdict(e) for e in q.evidence]
    return d


def _require(
    rec: dict[str, Any], name: str, kind: type | tuple[type, ...], file: Path | str, rid: Any
) -> Any:
    if name not in rec or rec[name] is None:
        raise DataError(file, rid, name, "missing required field")
    value = rec[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        expected = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DataError(file, rid, name, f"expected {expected}, got {type(value).__name__}")
    return value


def _str_list(rec: dict[str, Any], name: str, file: Path | str, rid: Any) -> tuple[str, ...]:
    value = rec.get(name, [])
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DataError(file, rid, name, "expected a list of strings")
    return tuple(value)


def _no_nul(text: str, file: Path | str, rid: Any, name: str) -> None:
    """A NUL character is no text: it marks a binary or mis-converted file."""
    at = text.find("\x00")
    if at >= 0:
        raise DataError(file, rid, name, f"NUL character at offset {at} (binary or mis-converted)")


def paper_from_dict(rec: Any, file: Path | str, lineno: int) -> Paper:
    if not isinstance(rec, dict):
        raise DataError(file, lineno, None, "expected a JSON object")
    rid = rec.get("id", lineno)
    pid = _require(rec, "id", str, file, rid)
    if not pid.strip():
        raise DataError(file, lineno, "id", "empty id")
    text = _require(rec, "text", str, file, pid)
    if not text.strip():
        raise DataError(file, pid, "text", "paper has no text (empty paper)")
    _no_nul(text, file, pid, "text")
    return Paper(
        id=pid,
        title=str(rec.get("title") or ""),
        text=text,
        source=str(rec.get("source") or ""),
        licence=str(rec.get("licence") or ""),
    )


def question_from_dict(rec: Any, file: Path | str, lineno: int) -> Question:
    if not isinstance(rec, dict):
        raise DataError(file, lineno, None, "expected a JSON object")
    rid = rec.get("id", lineno)
    qid = _require(rec, "id", str, file, rid)
    text = _require(rec, "question", str, file, qid)
    if not text.strip():
        raise DataError(file, qid, "question", "empty question")
    _no_nul(text, file, qid, "question")
    tier = rec.get("tier", "L1")
    if tier not in TIERS:
        raise DataError(file, qid, "tier", f"must be one of {', '.join(TIERS)}, got {tier!r}")
    types = _str_list(rec, "types", file, qid)
    unknown = [t for t in types if t not in QUESTION_TYPES]
    if unknown:
        raise DataError(file, qid, "types", f"unknown question type(s) {unknown}")
    paper_ids = _str_list(rec, "paper_ids", file, qid)
    if not paper_ids:
        raise DataError(file, qid, "paper_ids", "a question must cite at least one source paper")
    spans = []
    raw_evidence = rec.get("evidence") or []
    if not isinstance(raw_evidence, list):
        raise DataError(file, qid, "evidence", "expected a list")
    for i, ev in enumerate(raw_evidence):
        fname = f"evidence[{i}]"
        if not isinstance(ev, dict):
            raise DataError(file, qid, fname, "expected an object {paper_id, start, end}")
        for key, kind in (("paper_id", str), ("start", int), ("end", int)):
            if key not in ev:
                raise DataError(file, qid, f"{fname}.{key}", "missing required field")
            if not isinstance(ev[key], kind) or isinstance(ev[key], bool):
                raise DataError(file, qid, f"{fname}.{key}", f"expected {kind.__name__}")
        if not 0 <= ev["start"] < ev["end"]:
            raise DataError(
                file, qid, fname, f"bad span [{ev['start']}, {ev['end']}): need 0 <= start < end"
            )
        spans.append(EvidenceSpan(ev["paper_id"], ev["start"], ev["end"]))
    gold_label = rec.get("gold_label")
    if gold_label is not None and not isinstance(gold_label, str):
        raise DataError(file, qid, "gold_label", "expected a string or null")
    if gold_label is not None and gold_label not in GOLD_LABELS:
        raise DataError(
            file, qid, "gold_label",
            f"{gold_label!r} is not a known direction label ({', '.join(GOLD_LABELS)}) or null; "
            "an unknown label could never be matched and would score every answer 0",
        )  # fmt: skip
    meta = rec.get("meta") or {}
    if not isinstance(meta, dict):
        raise DataError(file, qid, "meta", "expected an object")
    return Question(
        id=qid,
        question=text,
        gold_answer=str(rec.get("gold_answer") or ""),
        must_have=_str_list(rec, "must_have", file, qid),
        paper_ids=paper_ids,
        tier=tier,
        types=types,
        evidence=tuple(spans),
        gold_label=gold_label,
        meta=meta,
    )


def validate_corpus(corpus: Corpus, papers_file: str | Path, questions_file: str | Path) -> None:
    """Cross-record checks: unique ids, cited papers exist, evidence inside its paper."""
    papers: dict[str, Paper] = {}
    for p in corpus.papers:
        if p.id in papers:
            raise DataError(papers_file, p.id, "id", "duplicate paper id")
        papers[p.id] = p
    if not papers:
        raise DataError(papers_file, None, None, "corpus has no papers")
    seen: set[str] = set()
    for q in corpus.questions:
        if q.id in seen:
            raise DataError(questions_file, q.id, "id", "duplicate question id")
        seen.add(q.id)
        for pid in q.paper_ids:
            if pid not in papers:
                raise DataError(questions_file, q.id, "paper_ids", f"cites unknown paper {pid!r}")
        for i, ev in enumerate(q.evidence):
            if ev.paper_id not in papers:
                raise DataError(
                    questions_file,
                    q.id,
                    f"evidence[{i}].paper_id",
                    f"unknown paper {ev.paper_id!r}",
                )
            n = len(papers[ev.paper_id].text)
            if ev.end > n:
                raise DataError(
                    questions_file,
                    q.id,
                    f"evidence[{i}].end",
                    f"offset {ev.end} lies outside paper {ev.paper_id!r} ({n} characters)",
                )
    if not corpus.questions:
        raise DataError(questions_file, None, None, "corpus has no questions")
