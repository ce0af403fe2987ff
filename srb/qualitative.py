"""Qualitative tables in Markdown: what each system actually answered, next to its score.

Table A: for chosen questions, every native-budget cell's answer excerpt, score and whether it
states the gold direction. Table B: one system's answers to the same questions across budgets,
with the characters it restored. Scores are what the judge gave; "invalid" where it failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from srb.atomic import atomic_write
from srb.data.canonical import iter_jsonl
from srb.data.schema import Question
from srb.retrieve import parse_budget
from srb.scores import Cell, cell_label
from srb.tables import markdown_table

CellFiles = Mapping[Cell, tuple[str | Path, str | Path, str | Path]]  # answers, judgments, context


def excerpt(text: str, limit: int) -> str:
    """One line, Markdown-table safe, cut at a word boundary with an ellipsis."""
    flat = " ".join(text.split()).replace("|", "\\|")
    if len(flat) <= limit:
        return flat
    cut = flat[:limit].rsplit(" ", 1)[0]
    return cut + " …"


def _by_question(path: str | Path) -> dict[str, dict[str, Any]]:
    return {r["question_id"]: r for _, r in iter_jsonl(Path(path))}


def choose_questions(questions: Sequence[Question], spec: int | Sequence[str]) -> list[Question]:
    if isinstance(spec, int):
        return list(questions[:spec])
    by_id = {q.id: q for q in questions}
    missing = [q for q in spec if q not in by_id]
    if missing:
        raise ValueError(f"analysis.qualitative.questions: unknown question ids {missing}")
    return [by_id[q] for q in spec]


def _score(judgment: Mapping[str, Any] | None) -> str:
    if judgment is None:
        return "–"
    return f"{judgment['composite']:.2f}" if judgment["valid"] else "invalid"


def _label(judgment: Mapping[str, Any] | None) -> str:
    if judgment is None or judgment.get("label_correct") is None:
        return "–"
    return "yes" if judgment["label_correct"] else "no"


def write_qualitative(
    questions: Sequence[Question],
    files: CellFiles,
    system: str,
    excerpt_chars: int,
    title: str,
    md_out: str | Path,
) -> None:
    loaded = {cell: tuple(_by_question(p) for p in paths) for cell, paths in files.items()}
    native = [c for c in loaded if c[2] == "native" or c[0] in ("base", "direct_read")]
    sweep = sorted(
        (c for c in loaded if f"{c[0]}/{c[1]}" == system),
        key=lambda c: parse_budget(c[2]) or 0,
    )
    parts = [f"# {title}\n"]
    parts.append(
        "Answer excerpts as the synthesizer wrote them; score = the judge's composite (0-10), "
        "gold = whether the answer states the gold direction (LLM-free).\n"
    )
    parts.append("## A. Every system on the same questions (native budget)\n")
    cols_a = ["cell", "score", "gold", "answer"]
    for q in questions:
        rows = []
        for cell in native:
            answers, judged, _ = loaded[cell]
            if q.id not in answers:
                continue
            rows.append({"cell": cell_label(cell), "score": _score(judged.get(q.id)),
                         "gold": _label(judged.get(q.id)),
                         "answer": excerpt(answers[q.id]["answer"], excerpt_chars)})  # fmt: skip
        parts.append(f"### {q.id}: {excerpt(q.question, 400)}\n")
        parts.append(f"Gold answer: {excerpt(q.gold_answer, 400)}\n")
        parts.append(markdown_table(rows, cols_a) if rows else "_no answers for this question_\n")
    parts.append(f"## B. {system} across budgets\n")
    if not sweep:
        parts.append(f"_not applicable: {system} has no synthesized cells in this grid_\n")
    cols_b = ["budget", "chars", "score", "gold", "answer"]
    for q in questions if sweep else []:
        rows = []
        for cell in sweep:
            answers, judged, context = loaded[cell]
            if q.id not in answers:
                continue
            rows.append({"budget": cell[2], "chars": context.get(q.id, {}).get("achieved_chars"),
                         "score": _score(judged.get(q.id)), "gold": _label(judged.get(q.id)),
                         "answer": excerpt(answers[q.id]["answer"], excerpt_chars)})  # fmt: skip
        parts.append(f"### {q.id}\n")
        parts.append(markdown_table(rows, cols_b) if rows else "_no answers for this question_\n")
    with atomic_write(md_out) as fh:
        fh.write("\n".join(parts))
