"""Importer for the seed benchmark's published markdown layout (queries, ground truth, full texts).

The published files were written for people, not parsers: field order drifts, the ground-truth
format is not specified anywhere, and quotes come from OCR'd PDFs. So this importer keeps whatever
it can read and returns a list of human-readable problems (file, query id, what) instead of failing
on the first odd line. Only a missing file or directory, or a corpus that cannot validate, raises.

Layout (see the data-format note)::

    benchmarks/<corpus>/queries.md, ground_truth.md, queries_holdout.md, ground_truth_holdout.md
    datasets/<corpus>/full_text/NN_shortname.md
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from srb.data.schema import (
    QUESTION_TYPES,
    Corpus,
    DataError,
    Paper,
    Question,
    paper_from_dict,
    question_from_dict,
    validate_corpus,
)

log = logging.getLogger(__name__)

LICENCE = "CC-BY-4.0"
MIN_QUOTE_CHARS = 20

_PAPER_FILE = re.compile(r"^(\d+)_(.+)$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# "L1 — Easy (22 queries)", "## L2 - Medium", "**L3 — Hard**": a tier heading, not a query.
_TIER_HEADING = re.compile(r"^\s{0,3}(?:#{1,6}\s*)?[*_]*\s*(?:Tier\s+)?L([123])\b(?!\d)", re.I)
# A line naming a query id: "PQ7: title", "### PQ7 — title", "**PQ7**", "**PQ7:** text", "TX12." ...
_ID_LINE = re.compile(
    r"^\s{0,3}(?P<hash>#{1,6}\s*)?(?P<emph>[*_]{1,3}(?=\S))?\s*(?:Query\s+)?"
    r"(?P<id>[A-Z]{1,5}\d+)\b(?P<rest>.*)$"
)
_ID_PUNCT = re.compile(r"^\s*(?:[:.)(\[—–\-|,]|$)")
_LABEL = re.compile(
    r"(?i)(?<![\w])(query|question|types?|difficulty|tier|source\s+notes?|sources?)\s*:"
)
_TIER_WORDS = {"easy": "L1", "medium": "L2", "moderate": "L2", "hard": "L3", "difficult": "L3"}
_NOTE_REF = re.compile(r"#\s?(\d+)")
_BULLET = re.compile(r"^(\s*)(?:[-*+]|\d+[.)])\s+(.*)$")
_QUOTE = re.compile(r"\"([^\"]+)\"|“([^”]+)”")
_QUOTE_PAIRS = {'"': '"', "“": "”", "'": "'", "‘": "’"}


@dataclass
class _RawQuery:
    qid: str
    file: str
    title: str
    block: str
    heading_tier: str | None
    fields: dict[str, str] = field(default_factory=dict)


@dataclass
class _Fact:
    text: str
    search: str  # the bullet plus its indented sub-bullets: where verbatim quotes are looked for


def load_published(root: str | Path, corpus: str) -> tuple[Corpus, list[str]]:
    """Import one corpus of the published dataset; returns the corpus and what could not be read.

    Holdout questions carry ``meta["split"] == "holdout"`` so evaluation can keep them apart.
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError(root, None, None, "dataset root directory does not exist")
    full_text = root / "datasets" / corpus / "full_text"
    bench = root / "benchmarks" / corpus
    for d in (full_text, bench):
        if not d.is_dir():
            raise DataError(d, None, None, "directory does not exist")
    problems: list[str] = []
    papers, by_number = _load_papers(root, full_text, problems)
    if not papers:
        raise DataError(full_text, None, None, "no NN_shortname.md paper files found")
    texts = {p.id: p.text for p in papers}

    questions: list[Question] = []
    seen: set[str] = set()
    splits = [("main", "queries.md", "ground_truth.md", True)]
    splits.append(("holdout", "queries_holdout.md", "ground_truth_holdout.md", False))
    for split, qname, gname, required in splits:
        qfile, gfile = bench / qname, bench / gname
        if not required and not qfile.exists() and not gfile.exists():
            problems.append(f"{_rel(qfile, root)}: no {split} queries (file absent)")
            continue
        for f in (qfile, gfile):
            if not f.is_file():
                raise DataError(f, None, None, "missing benchmark file")
        raw = _parse_queries(_read(qfile, root, problems), _rel(qfile, root), problems)
        gold = _parse_ground_truth(_read(gfile, root, problems), _rel(gfile, root), problems)
        for rq in raw:
            if rq.qid in seen:
                problems.append(f"{rq.file}, {rq.qid}: duplicate query id, later one skipped")
                continue
            q = _build_question(rq, split, by_number, texts, gold, _rel(gfile, root), problems)
            if q is not None:
                seen.add(rq.qid)
                questions.append(q)
        for qid in gold:
            if qid not in {rq.qid for rq in raw}:
                problems.append(f"{_rel(gfile, root)}, {qid}: ground truth for an unknown query")

    result = Corpus(
        name=corpus,
        papers=tuple(papers),
        questions=tuple(questions),
        manifest={
            "format": "published",
            "root": str(root),
            "corpus": corpus,
            "licence": LICENCE,
            "n_problems": len(problems),
        },
    )
    validate_corpus(result, full_text, bench / "queries.md")
    for p in problems:
        log.debug("%s", p)
    log.log(
        logging.WARNING if problems else logging.INFO,
        "imported %s: %d papers, %d questions, %d problems (returned to the caller)",
        corpus,
        len(papers),
        len(questions),
        len(problems),
    )
    return result, problems


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _read(path: Path, root: Path, problems: list[str]) -> str:
    """Read UTF-8; OCR mirrors sometimes are not, and a few replaced bytes beat losing a paper."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        problems.append(f"{_rel(path, root)}: not valid UTF-8 ({exc.reason}); bad bytes replaced")
        return path.read_text(encoding="utf-8", errors="replace")


def _strip_md(text: str) -> str:
    """Drop emphasis and code markers that are presentation, not content."""
    text = re.sub(r"(\*\*|__)(.+?)\1", r"\2", text)
    text = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"\1", text)
    text = re.sub(r"(?<![\w_])_(?!\s)(.+?)(?<!\s)_(?![\w_])", r"\1", text)
    return text.replace("`", "").strip()


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and _QUOTE_PAIRS.get(text[0]) == text[-1]:
        inner = text[1:-1]
        if text[0] not in inner and text[-1] not in inner:
            return inner.strip()
    return text


def _load_papers(
    root: Path, full_text: Path, problems: list[str]
) -> tuple[list[Paper], dict[int, str]]:
    papers: list[Paper] = []
    by_number: dict[int, str] = {}
    for path in sorted(full_text.glob("*.md")):
        rel = _rel(path, root)
        m = _PAPER_FILE.match(path.stem)
        if not m:
            problems.append(f"{rel}: not named NN_shortname.md, ignored")
            continue
        text = _read(path, root, problems)
        if not text.strip():
            problems.append(f"{rel}: empty paper, ignored")
            continue
        number = int(m.group(1))
        if number in by_number:
            problems.append(f"{rel}: #{number} already belongs to {by_number[number]}, ignored")
            continue
        title = path.stem
        for line in text.splitlines():
            h = _HEADING.match(line)
            if h and _strip_md(h.group(2)):
                title = _strip_md(h.group(2))
                break
        rec = {"id": path.stem, "title": title, "text": text, "source": rel, "licence": LICENCE}
        papers.append(paper_from_dict(rec, path, 1))
        by_number[number] = path.stem
    return papers, by_number


def _tier_heading(line: str) -> str | None:
    """A tier heading is a markdown heading (or bold line) naming L1/L2/L3, never a query line."""
    if _LABEL.search(line) and not _HEADING.match(line):
        return None
    m = _TIER_HEADING.match(line)
    if m and (_HEADING.match(line) or re.search(r"easy|medium|hard|quer", line, re.I)):
        return f"L{m.group(1)}"
    return None


@dataclass
class _IdLine:
    qid: str
    rest: str  # text after the id, emphasis and separator removed
    level: int | None  # markdown heading level, None for a bold or plain line
    inline_text: bool  # "**PQ7:** text": the emphasis closed on the id, so rest is content


def _id_header(line: str) -> _IdLine | None:
    """Recognise a line that opens a query or ground-truth section.

    A heading or emphasised id may be followed by anything; a plain line needs punctuation right
    after the id, so prose that happens to start with a token like "GPT4 is" is not taken.
    """
    m = _ID_LINE.match(line)
    if not m or re.fullmatch(r"L\d", m["id"]):
        return None
    rest, emph = m["rest"], m["emph"] or ""
    closed = bool(emph) and re.match(r"\s*[:.]?\s*" + re.escape(emph[::-1]), rest) is not None
    if emph:
        rest = re.sub(r"^\s*([:.]?)\s*" + re.escape(emph[::-1]), r"\1", rest)
        if not closed and rest.rstrip().endswith(emph[::-1]):
            rest = rest.rstrip()[: -len(emph)]
    if not (m["hash"] or emph) and not _ID_PUNCT.match(rest):
        return None
    rest = re.sub(r"^\s*[:.)—–\-|,]\s*", "", rest).strip()
    level = len(m["hash"].strip()) if m["hash"] else None
    return _IdLine(m["id"], rest, level, closed)


def _parse_queries(text: str, file: str, problems: list[str]) -> list[_RawQuery]:
    queries: list[_RawQuery] = []
    tier: str | None = None
    current: _RawQuery | None = None
    body: list[str] = []

    def close() -> None:
        if current is not None:
            current.block = "\n".join(body)
            queries.append(current)

    for line in text.splitlines():
        heading_tier = _tier_heading(line)
        if heading_tier:
            close()
            current, body, tier = None, [], heading_tier
            continue
        idl = _id_header(line)
        if idl:
            close()
            label = _LABEL.search(idl.rest)
            title = idl.rest[: label.start()] if label else idl.rest
            current = _RawQuery(idl.qid, file, _strip_md(title).strip(" -—–:|"), "", tier)
            body = [idl.rest[label.start() :]] if label else []
            continue
        if _HEADING.match(line):
            close()  # any other heading ends a query block
            current, body = None, []
            continue
        if current is not None:
            body.append(line)
    close()
    for q in queries:
        q.fields = _fields(q.block.replace("**", "").replace("__", ""))
    if not queries:
        problems.append(f"{file}: no queries found")
    return queries


def _fields(block: str) -> dict[str, str]:
    """Split 'Query: "..." Type: a + b | Difficulty: L1 Source notes: #05 X' into its labels."""
    out: dict[str, str] = {}
    matches = list(_LABEL.finditer(block))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(block)
        label = re.sub(r"\s+", " ", m.group(1).lower())
        key = {
            "question": "query",
            "type": "types",
            "tier": "difficulty",
            "source note": "sources",
            "source notes": "sources",
            "source": "sources",
        }.get(label, label)
        value = block[m.end() : end].strip()
        # only the question may wrap; other fields end with their line
        value = re.split(r"\n\s*\n" if key == "query" else r"\n", value)[0]
        value = " ".join(value.split()).strip(" |")
        if key == "query" and value[:1] in _QUOTE_PAIRS:
            close = value.rfind(_QUOTE_PAIRS[value[0]])
            value = value[1:close] if close > 0 else value[1:]
        out.setdefault(key, value)
    return out


def _build_question(
    rq: _RawQuery,
    split: str,
    by_number: dict[int, str],
    texts: dict[str, str],
    gold: dict[str, str],
    gfile: str,
    problems: list[str],
) -> Question | None:
    where = f"{rq.file}, {rq.qid}"
    question = rq.fields.get("query", "").strip()
    if not question:
        problems.append(f"{where}: no 'Query:' text found, query skipped")
        return None

    tier = rq.heading_tier
    diff = rq.fields.get("difficulty", "")
    if diff:
        m = re.search(r"\bL([123])\b", diff)
        word = next((t for w, t in _TIER_WORDS.items() if w in diff.lower()), None)
        field_tier = f"L{m.group(1)}" if m else word
        if field_tier is None:
            problems.append(f"{where}: unreadable Difficulty {diff!r}")
        else:
            if tier and tier != field_tier:
                problems.append(
                    f"{where}: Difficulty {field_tier} disagrees with heading {tier}; "
                    f"using {field_tier}"
                )
            tier = field_tier
    if tier is None:
        problems.append(f"{where}: no Difficulty and no tier heading, query skipped")
        return None

    types: list[str] = []
    for raw in re.split(r"\s*[+,/]\s*", rq.fields.get("types", "")):
        t = re.sub(r"\s+", "-", _strip_md(raw).strip(" .;").lower())
        if not t:
            continue
        if t in QUESTION_TYPES:
            if t not in types:
                types.append(t)
        else:
            problems.append(f"{where}: unknown type {t!r} dropped")
    if "types" not in rq.fields:
        problems.append(f"{where}: no 'Type:' field")

    notes = rq.fields.get("sources", "")
    paper_ids: list[str] = []
    for num in _NOTE_REF.findall(notes):
        pid = by_number.get(int(num))
        if pid is None:
            problems.append(f"{where}: source note #{num} has no full_text paper, dropped")
        elif pid not in paper_ids:
            paper_ids.append(pid)
    if not paper_ids:
        problems.append(f"{where}: no resolvable source paper (notes {notes!r}), query skipped")
        return None

    gold_answer, facts = "", []
    if rq.qid in gold:
        gold_answer, facts = gold[rq.qid], _facts(gold[rq.qid])
        if not facts:
            problems.append(f"{gfile}, {rq.qid}: ground truth has no bullet facts")
    else:
        problems.append(f"{gfile}, {rq.qid}: no ground truth section found")

    evidence: list[dict[str, Any]] = []
    for fact in facts:
        for quote in _quotes(fact.search):
            span = _find_quote(quote, paper_ids, texts)
            if span is None:
                short = quote if len(quote) <= 60 else quote[:57] + "..."
                problems.append(
                    f"{gfile}, {rq.qid}: quote not found verbatim in {', '.join(paper_ids)}: "
                    f"{short!r}"
                )
            elif span not in evidence:
                evidence.append(span)

    meta: dict[str, Any] = {"split": split}
    if rq.title:
        meta["title"] = rq.title
    rec = {
        "id": rq.qid,
        "question": question,
        "gold_answer": gold_answer,
        "must_have": [f.text for f in facts],
        "paper_ids": paper_ids,
        "tier": tier,
        "types": types,
        "evidence": evidence,
        "meta": meta,
    }
    return question_from_dict(rec, rq.file, 0)


def _parse_ground_truth(text: str, file: str, problems: list[str]) -> dict[str, str]:
    """Sections start at a line naming a query id and end at the next id or an equal heading."""
    sections: dict[str, str] = {}
    qid: str | None = None
    level = 7
    body: list[str] = []

    def close() -> None:
        if qid is None:
            return
        content = "\n".join(body).strip()
        content = re.sub(r"(?:\n\s*(?:-{3,}|\*{3,}|_{3,})\s*)+$", "", content).strip()
        if qid in sections:
            problems.append(f"{file}, {qid}: more than one ground-truth section, first kept")
        else:
            sections[qid] = content

    for line in text.splitlines():
        h = _HEADING.match(line)
        idl = _id_header(line)
        if idl:
            close()
            qid, body = idl.qid, []
            level = idl.level or 7
            if idl.inline_text and idl.rest:
                body.append(idl.rest)  # "**PQ7:** the answer ..." keeps the answer text
            continue
        if h is not None and (len(h.group(1)) <= level or level == 7):
            close()
            qid, body = None, []
            continue
        if qid is not None:
            body.append(line)
    close()
    if not sections:
        problems.append(f"{file}: no ground-truth sections found")
    return sections


def _facts(section: str) -> list[_Fact]:
    """Top-level bullets are the must-have facts; sub-bullets and wrapped lines belong to them."""
    items: list[tuple[int, list[str]]] = []
    open_item = False
    for line in section.splitlines():
        m = _BULLET.match(line)
        if m:
            items.append((len(m.group(1).expandtabs(4)), [m.group(2)]))
            open_item = True
        elif not line.strip():
            continue
        elif open_item and line[:1].isspace():
            items[-1][1].append(line.strip())
        else:
            open_item = False  # a paragraph ends the current bullet
    if not items:
        return []
    top = min(indent for indent, _ in items)
    facts: list[_Fact] = []
    for indent, lines in items:
        joined = " ".join(lines)
        if indent == top or not facts:
            facts.append(_Fact(_unquote(_strip_md(joined)), joined))
        else:
            facts[-1].search += "\n" + joined
    return [f for f in facts if f.text]


def _quotes(text: str) -> list[str]:
    out = []
    for m in _QUOTE.finditer(text):
        q = (m.group(1) or m.group(2) or "").strip()
        if len(q) >= MIN_QUOTE_CHARS:
            out.append(q)
    return out


def _find_quote(quote: str, paper_ids: list[str], texts: dict[str, str]) -> dict[str, Any] | None:
    for pid in paper_ids:
        start = texts[pid].find(quote)
        if start >= 0:
            return {"paper_id": pid, "start": start, "end": start + len(quote)}
    return None


__all__ = ["load_published", "LICENCE", "MIN_QUOTE_CHARS"]
