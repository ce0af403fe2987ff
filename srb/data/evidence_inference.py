"""Evidence Inference 2.0 (the embedded default's source) into canonical records.

Each prompt asks for the direction of an intervention-vs-comparator effect on an outcome, with
a majority gold label and verbatim evidence spans. We map it to the paper's rubric: the gold
answer states the direction, the must-have facts are the direction and the evidence sentences,
and the spans become evidence character offsets (checked exact on load).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from srb.data.canonical import iter_jsonl
from srb.data.schema import Corpus, DataError, EvidenceSpan, Paper, Question, validate_corpus

LABELS = ("significantly increased", "significantly decreased", "no significant difference")


def gold_answer(intervention: str, comparator: str, outcome: str, label: str) -> str:
    outcome = outcome.strip()
    if label == "no significant difference":
        return (
            f"There was no significant difference in {outcome} between {intervention.strip()} "
            f"and {comparator.strip()}."
        )
    verb = label.split()[-1]
    return (
        f"{intervention.strip()} significantly {verb} {outcome} compared with {comparator.strip()}."
    )


def _papers_from_dir(root: Path, articles: dict[str, Any]) -> dict[str, Paper]:
    papers = {}
    for path in sorted((root / "papers").glob("*.txt")):
        pid = path.stem
        info = articles.get(pid, {})
        papers[pid] = Paper(
            id=pid,
            title=info.get("title", ""),
            text=path.read_text(encoding="utf-8"),
            source=f"PubMed Central {pid} via Evidence Inference 2.0",
            licence=(info.get("license") or {}).get("text", ""),
        )
    return papers


def _papers_from_jsonl(path: Path) -> dict[str, Paper]:
    papers = {}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            rec = json.loads(line)
            pid = rec.get("pmcid") or rec.get("id")
            if not pid:
                raise DataError(path, lineno, "pmcid", "missing paper id")
            papers[pid] = Paper(
                id=pid,
                title=rec.get("title", ""),
                text=rec["text"],
                source=f"PubMed Central {pid} via Evidence Inference 2.0",
                licence=rec.get("license", ""),
            )
    return papers


def _questions(path: Path, records: Any, papers: dict[str, Paper]) -> list[Question]:
    questions = []
    for lineno, rec in records:
        qid = str(rec.get("prompt_id", f"line {lineno}"))
        label = rec.get("majority_label")
        if label not in LABELS:
            raise DataError(path, qid, "majority_label", f"expected one of {LABELS}, got {label!r}")
        pid = rec["pmcid"]
        text = papers[pid].text if pid in papers else None
        spans, quotes = [], []
        for i, ev in enumerate(rec.get("evidence", [])):
            if text is not None and text[ev["start"] : ev["end"]] != ev["text"]:
                raise DataError(path, qid, f"evidence[{i}]", "span text differs from the paper")
            span = EvidenceSpan(pid, ev["start"], ev["end"])
            if span not in spans:
                spans.append(span)
                quotes.append(ev["text"].strip())
        questions.append(
            Question(
                id=qid,
                question=rec["question"],
                gold_answer=gold_answer(
                    rec["intervention"], rec["comparator"], rec["outcome"], label
                ),
                must_have=(f"Reported difference: {label}", *dict.fromkeys(quotes)),
                paper_ids=(pid,),
                tier="L1",
                types=("factual", "comparative"),
                evidence=tuple(spans),
                gold_label=label,
                meta={
                    "outcome": rec["outcome"].strip(),
                    "intervention": rec["intervention"].strip(),
                    "comparator": rec["comparator"].strip(),
                    "annotator_labels": rec.get("labels", []),
                },
            )
        )
    return questions


def load_evidence_inference(root: str | Path, name: str = "evidence-inference") -> Corpus:
    """Read either the CC-BY test layout (papers/*.txt) or the train/val layout (*.jsonl.gz)."""
    root = Path(root)
    if (root / "papers").is_dir():
        articles_file = root / "articles.json"
        articles = json.loads(articles_file.read_text()) if articles_file.exists() else {}
        papers = _papers_from_dir(root, articles)
        qfile = root / "questions.jsonl"
        questions = _questions(qfile, iter_jsonl(qfile), papers)
    elif (root / "papers.jsonl.gz").is_file():
        papers = _papers_from_jsonl(root / "papers.jsonl.gz")
        qfile = root / "questions.jsonl.gz"
        with gzip.open(qfile, "rt", encoding="utf-8") as fh:
            records = [(n, json.loads(line)) for n, line in enumerate(fh, 1)]
        questions = _questions(qfile, records, papers)
    else:
        raise DataError(root, None, None, "not an Evidence Inference directory (no papers/)")
    corpus = Corpus(name=name, papers=tuple(papers.values()), questions=tuple(questions))
    validate_corpus(corpus, root / "papers", qfile)
    return corpus
