"""LLM-free retrieval diagnostics per cell: evidence recall@B, evidence token coverage and
source-paper recall.

These need no model and no judge, so they stay trustworthy even when the synthesizer is tiny:
evidence recall is the share of gold evidence characters that the restored context covers (unit
systems only: it needs character spans). Evidence token coverage is the share of the gold
evidence's content tokens found anywhere in the restored text, so it also measures systems that
rewrite papers into facts or graph edges; it is computed for every system, for comparability.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from srb.atomic import atomic_write
from srb.budget_check import FAILURES, OK, BudgetError, BudgetVerdict, knob_inert
from srb.data.canonical import iter_jsonl, load_canonical
from srb.data.schema import Question
from srb.doctor import doctor_status
from srb.tables import markdown_table

Span = tuple[str, int, int]

_TOKEN = re.compile(r"[a-z0-9]+(?:[.,][0-9]+)*")
#: function words that carry no evidence (a short fixed list, so the metric is reproducible)
STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does for from had has have in into is "
    "it its may might more most no not of on or our than that the their then there these they "
    "this those to was we were what when which while who will with within without".split()
)


def content_tokens(text: str) -> set[str]:
    """Lower-cased word and number tokens (decimals kept whole), without function words."""
    return {
        t
        for t in _TOKEN.findall(text.lower())
        if t not in STOPWORDS and (len(t) > 1 or t.isdigit())
    }


def evidence_token_coverage(
    question: Question, record: dict[str, Any], paper_texts: dict[str, str]
) -> float | None:
    """Share of the gold evidence's content tokens present in the restored context; None (n/a)
    when the question has no evidence passages or they hold no content token."""
    if not question.evidence:
        return None
    gold: set[str] = set()
    for e in question.evidence:
        gold |= content_tokens(paper_texts[e.paper_id][e.start : e.end])
    if not gold:
        return None
    return len(gold & content_tokens(record.get("context") or "")) / len(gold)


def merge_spans(spans: Iterable[Span]) -> dict[str, list[tuple[int, int]]]:
    """Union of intervals per paper, so overlapping chunks are not counted twice."""
    by_paper: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for paper, start, end in spans:
        by_paper[paper].append((start, end))
    merged: dict[str, list[tuple[int, int]]] = {}
    for paper, intervals in by_paper.items():
        out: list[tuple[int, int]] = []
        for s, e in sorted(intervals):
            if out and s <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], e))
            else:
                out.append((s, e))
        merged[paper] = out
    return merged


def covered_chars(gold: Iterable[Span], retrieved: Iterable[Span]) -> tuple[int, int]:
    """(gold characters covered by retrieved spans, total gold characters)."""
    gold_m, got_m = merge_spans(gold), merge_spans(retrieved)
    total = covered = 0
    for paper, intervals in gold_m.items():
        for s, e in intervals:
            total += e - s
            for rs, re_ in got_m.get(paper, []):
                covered += max(0, min(e, re_) - max(s, rs))
    return covered, total


def evidence_recall(question: Question, record: dict[str, Any]) -> float | None:
    """Share of the gold evidence characters restored; None (n/a) without evidence or when the
    context is rewritten text with no character spans (a store system's facts)."""
    if not question.evidence or any(s[1] is None for s in record["spans"]):
        return None
    gold = [(e.paper_id, e.start, e.end) for e in question.evidence]
    covered, total = covered_chars(gold, [tuple(s) for s in record["spans"]])
    return covered / total


def source_paper_recall(question: Question, record: dict[str, Any]) -> float:
    got = {s[0] for s in record["spans"]}
    return sum(p in got for p in question.paper_ids) / len(question.paper_ids)


def cell_row(
    questions: dict[str, Question], cell_file: str | Path, paper_texts: dict[str, str]
) -> dict[str, Any]:
    records = [r for _, r in iter_jsonl(Path(cell_file))]
    unknown = [r["question_id"] for r in records if r["question_id"] not in questions]
    if unknown:
        raise ValueError(f"{cell_file}: questions not in the corpus: {unknown[:5]}")
    ev = [evidence_recall(questions[r["question_id"]], r) for r in records]
    ev_known = [v for v in ev if v is not None]
    cov = [evidence_token_coverage(questions[r["question_id"]], r, paper_texts) for r in records]
    cov_known = [v for v in cov if v is not None]
    requested = [r["requested_chars"] for r in records if r["requested_chars"] is not None]
    return {
        "n_questions": len(records),
        "n_with_evidence": len(ev_known),
        "evidence_recall": round(statistics.fmean(ev_known), 4) if ev_known else None,
        "evidence_token_coverage": round(statistics.fmean(cov_known), 4) if cov_known else None,
        "source_paper_recall": round(
            statistics.fmean(source_paper_recall(questions[r["question_id"]], r) for r in records),
            4,
        ),
        "mean_units": round(statistics.fmean(len(r["unit_ids"]) for r in records), 2),
        "mean_requested_chars": round(statistics.fmean(requested)) if requested else None,
        "mean_achieved_chars": round(statistics.fmean(r["achieved_chars"] for r in records)),
        "n_empty_context": sum(r["achieved_chars"] == 0 for r in records),
    }


COLUMNS = [
    "corpus",
    "system",
    "modality",
    "budget",
    "n_questions",
    "n_with_evidence",
    "evidence_recall",
    "evidence_token_coverage",
    "source_paper_recall",
    "mean_units",
    "mean_requested_chars",
    "mean_achieved_chars",
    "n_empty_context",
    "budget_ratio",
    "budget_status",
    "doctor",
]


def budget_columns(
    grid: Sequence[tuple[str, str, str]], verdict_files: Sequence[str | Path], tolerance: float
) -> tuple[list[dict[str, Any]], list[str]]:
    """Per cell the ratio and status of its budget verdict, plus a knob-inert check across each
    system/modality's budgets. Returns the columns and the failures (each naming its cell)."""
    verdicts = [json.loads(Path(f).read_text()) for f in verdict_files]
    columns, failures = [], []
    by_pair: dict[tuple[str, str], dict[str, BudgetVerdict]] = defaultdict(dict)
    for (system, modality, budget), v in zip(grid, verdicts, strict=True):
        status = v["status"]
        columns.append({"budget_ratio": v.get("ratio"), "budget_status": status})
        if status != "native":
            by_pair[(system, modality)][budget] = BudgetVerdict(**v)
            if status in FAILURES:
                failures.append(f"{system}/{modality}/{budget}: {status}: {v['reason']}")
    for (system, modality), per_budget in by_pair.items():
        if any(v.status == "knob_flat" for v in per_budget.values()):
            continue  # a library's own knob: marked on its cells (srb.budget_check), not a failure
        inert = knob_inert(per_budget, tolerance)
        if inert:
            failures.append(f"{system}/{modality}: knob_inert: {inert}")
            for i, (s, m, _) in enumerate(grid):
                if (s, m) == (system, modality) and columns[i]["budget_status"] == OK:
                    columns[i]["budget_status"] = "knob_inert"
    return columns, failures


def retrieval_table(
    corpus_name: str,
    corpus_dir: str | Path,
    cells: Sequence[tuple[str, str, str, str | Path]],
    csv_out: str | Path,
    md_out: str | Path,
    verdict_files: Sequence[str | Path] | None = None,
    tolerance: float = 0.25,
    gate: str = "fail",
    doctor_reports: Mapping[str, str | Path] | None = None,
) -> list[dict[str, Any]]:
    """cells: (system, modality, budget, cell file). Writes CSV and a Markdown rendering.

    With `verdict_files` (one per cell) each row carries its budget verdict; with `gate: fail`
    any off-budget cell or inert knob raises BudgetError after the tables are written."""
    corpus = load_canonical(corpus_dir)
    questions = {q.id: q for q in corpus.questions}
    texts = {p.id: p.text for p in corpus.papers}
    rows = [
        {
            "corpus": corpus_name,
            "system": s,
            "modality": m,
            "budget": b,
            **cell_row(questions, f, texts),
        }
        for s, m, b, f in cells
    ]
    if doctor_reports:
        status = {
            s: doctor_status(json.loads(Path(f).read_text())) for s, f in doctor_reports.items()
        }
        for row in rows:
            row["doctor"] = status.get(row["system"])
    failures: list[str] = []
    if verdict_files is not None:
        budget_cols, failures = budget_columns(
            [(s, m, b) for s, m, b, _ in cells], verdict_files, tolerance
        )
        for row, extra in zip(rows, budget_cols, strict=True):
            row.update(extra)
    with atomic_write(csv_out) as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    with atomic_write(md_out) as fh:
        fh.write(f"# Retrieval diagnostics: {corpus_name}\n\n")
        fh.write(
            "LLM-free. evidence_recall = share of gold evidence characters inside the restored "
            "context (n/a for systems that rewrite text: no character spans); "
            "evidence_token_coverage = share of the gold evidence's content tokens found in the "
            "restored text (every system); source_paper_recall = share of the question's source "
            "papers touched.\n\n"
        )
        fh.write(markdown_table(rows, COLUMNS[1:]))
        if failures:
            fh.write("\nOff budget:\n\n" + "".join(f"- {f}\n" for f in failures))
    if failures and gate == "fail":
        raise BudgetError(
            f"budget gate: corpus {corpus_name}: {len(failures)} cell(s) off budget:\n  "
            + "\n  ".join(failures)
        )
    return rows
