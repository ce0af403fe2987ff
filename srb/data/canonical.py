"""The canonical on-disk corpus: a directory with papers.jsonl, questions.jsonl, manifest.json.

Every other loader converts into this layout (the workflow's `prepare_corpus` rule writes it), so
everything downstream reads exactly one format.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from srb.atomic import write_json, write_jsonl
from srb.data.schema import (
    Corpus,
    DataError,
    Paper,
    Question,
    paper_from_dict,
    paper_to_dict,
    question_from_dict,
    question_to_dict,
    validate_corpus,
)

PAPERS = "papers.jsonl"
QUESTIONS = "questions.jsonl"
MANIFEST = "manifest.json"


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object); a broken line is a DataError naming the line."""
    with open(path, "rb") as fh:  # decoded line by line, so an encoding error names its line
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(
                    path, f"line {lineno}", None,
                    f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                    "re-encode the file as UTF-8",
                ) from None  # fmt: skip
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(path, f"line {lineno}", None, f"invalid JSON: {exc.msg}") from exc


def load_canonical(directory: str | Path, name: str | None = None) -> Corpus:
    directory = Path(directory)
    if not directory.is_dir():
        raise DataError(directory, None, None, "corpus directory does not exist")
    papers_file, questions_file = directory / PAPERS, directory / QUESTIONS
    for f in (papers_file, questions_file):
        if not f.is_file():
            raise DataError(f, None, None, "missing corpus file")
    manifest: dict[str, Any] = {}
    if (directory / MANIFEST).is_file():
        try:
            manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DataError(directory / MANIFEST, None, None, f"invalid JSON: {exc.msg}") from exc
    papers = tuple(paper_from_dict(r, papers_file, n) for n, r in iter_jsonl(papers_file))
    questions = tuple(
        question_from_dict(r, questions_file, n) for n, r in iter_jsonl(questions_file)
    )
    corpus = Corpus(
        name=name or manifest.get("name") or directory.name,
        papers=papers,
        questions=questions,
        manifest=manifest,
    )
    validate_corpus(corpus, papers_file, questions_file)
    return corpus


def write_canonical(corpus: Corpus, directory: str | Path) -> None:
    """Write the three files atomically; validates first so nothing half-valid lands."""
    directory = Path(directory)
    papers_file, questions_file = directory / PAPERS, directory / QUESTIONS
    for n, paper in enumerate(corpus.papers, 1):  # the same per-record rules as loading
        paper_from_dict(paper_to_dict(paper), papers_file, n)
    for n, question in enumerate(corpus.questions, 1):
        question_from_dict(question_to_dict(question), questions_file, n)
    validate_corpus(corpus, papers_file, questions_file)
    directory.mkdir(parents=True, exist_ok=True)
    write_jsonl(directory / PAPERS, (paper_to_dict(p) for p in corpus.papers))
    write_jsonl(directory / QUESTIONS, (question_to_dict(q) for q in corpus.questions))
    manifest = dict(corpus.manifest)
    manifest.update(
        name=corpus.name,
        n_papers=len(corpus.papers),
        n_questions=len(corpus.questions),
        n_characters=sum(len(p.text) for p in corpus.papers),
    )
    write_json(directory / MANIFEST, manifest)


__all__ = ["load_canonical", "write_canonical", "iter_jsonl", "Paper", "Question"]
