"""The published-markdown importer on a small fake copy of the dataset repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from srb.data.published import _parse_ground_truth, load_published
from srb.data.schema import DataError, EvidenceSpan

CORPUS = "public_ai_memory"

RAPTOR = """# RAPTOR: Recursive Abstractive Processing

We introduce RAPTOR, which recursively embeds, clusters and summarizes chunks of text.
The resulting tree has multiple levels of abstraction.
"""
LONGMEMEVAL = """Intro line before the heading.

## LongMemEval: Benchmarking Chat Assistants

LongMemEval contains 500 curated questions that test five core memory abilities.
"""
MEMGPT = """MemGPT treats the context window as a constrained memory resource.
It pages data in and out, like an operating system.
"""

# one-line queries, as in the published files (built in two pieces to keep lines short)
PQ1_LINE = (
    'Query: "What structure does RAPTOR build over the documents?" Type: factual + mechanistic | '
    "Difficulty: L1 Source notes: #05 RAPTOR"
)
PQ67_LINE = (
    'Query: "Which paper introduced recursive summarization trees?" Type: factual | '
    "Difficulty: L2 | Source notes: #05"
)

QUERIES = f"""# Public AI memory: queries

## L1 — Easy (2 queries)

PQ1: What RAPTOR builds

{PQ1_LINE}

PQ2: LongMemEval size

Query: "How many questions does LongMemEval contain?"
Type: quantitative + telepathic
Source notes: #19 LongMemEval, #42 Missing paper

## L2 — Medium (2 queries)

### PQ3: Memory across papers

**Query:** "How do RAPTOR and
MemGPT differ in managing context?"
Type: comparative + Cross-Document
Difficulty: L3
Source notes: #05 RAPTOR, #7 MemGPT

PQ4: Orphan

Query: "A question citing nothing real?" Type: factual Source notes: #99 Nothing
"""

GROUND_TRUTH = """# Ground truth

## PQ1: What RAPTOR builds

RAPTOR builds a tree of summaries.

- RAPTOR builds a **tree** bottom-up: "recursively embeds, clusters and summarizes chunks of text"
- The tree has *multiple* levels of abstraction

---

## PQ2

* LongMemEval has 500 questions ("LongMemEval contains 500 curated questions")
* It tests memory: "this sentence is not in the paper at all, anywhere"

**PQ3:** RAPTOR summarises; MemGPT pages.

1. MemGPT treats context as memory
   - quote: "treats the context window as a constrained memory resource"
2. "RAPTOR uses trees"
"""

HOLDOUT_QUERIES = f"""## L2 — Medium (1 query)

PQ67: Held out
{PQ67_LINE}
"""

HOLDOUT_TRUTH = """# Holdout ground truth

Nothing here yet.
"""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def published(tmp_path: Path) -> Path:
    full = tmp_path / "datasets" / CORPUS / "full_text"
    _write(full / "05_raptor.md", RAPTOR)
    _write(full / "19_longmemeval.md", LONGMEMEVAL)
    _write(full / "07_memgpt.md", MEMGPT)
    bench = tmp_path / "benchmarks" / CORPUS
    _write(bench / "queries.md", QUERIES)
    _write(bench / "ground_truth.md", GROUND_TRUTH)
    _write(bench / "queries_holdout.md", HOLDOUT_QUERIES)
    _write(bench / "ground_truth_holdout.md", HOLDOUT_TRUTH)
    return tmp_path


def test_papers(published: Path) -> None:
    corpus, _ = load_published(published, CORPUS)
    papers = corpus.paper_index()
    assert sorted(papers) == ["05_raptor", "07_memgpt", "19_longmemeval"]
    assert papers["05_raptor"].title == "RAPTOR: Recursive Abstractive Processing"
    assert papers["19_longmemeval"].title == "LongMemEval: Benchmarking Chat Assistants"
    assert papers["07_memgpt"].title == "07_memgpt"  # no heading: the stem
    assert papers["05_raptor"].text == RAPTOR
    assert papers["05_raptor"].source == f"datasets/{CORPUS}/full_text/05_raptor.md"
    assert papers["05_raptor"].licence == "CC-BY-4.0"
    assert corpus.name == CORPUS


def test_queries(published: Path) -> None:
    corpus, _ = load_published(published, CORPUS)
    qs = {q.id: q for q in corpus.questions}
    assert [q.id for q in corpus.questions] == ["PQ1", "PQ2", "PQ3", "PQ67"]  # PQ4 skipped

    assert qs["PQ1"].question == "What structure does RAPTOR build over the documents?"
    assert qs["PQ1"].tier == "L1"
    assert qs["PQ1"].types == ("factual", "mechanistic")
    assert qs["PQ1"].paper_ids == ("05_raptor",)
    assert qs["PQ1"].meta == {"split": "main", "title": "What RAPTOR builds"}

    assert qs["PQ2"].tier == "L1"  # from the enclosing heading
    assert qs["PQ2"].types == ("quantitative",)  # unknown type dropped
    assert qs["PQ2"].paper_ids == ("19_longmemeval",)  # #42 dropped

    # own-line fields, bold label, question wrapped over two lines, "#7" without a leading zero
    assert qs["PQ3"].question == "How do RAPTOR and MemGPT differ in managing context?"
    assert qs["PQ3"].tier == "L3"  # Difficulty wins over the L2 heading
    assert qs["PQ3"].types == ("comparative", "cross-document")
    assert qs["PQ3"].paper_ids == ("05_raptor", "07_memgpt")

    assert qs["PQ67"].tier == "L2"
    assert qs["PQ67"].meta["split"] == "holdout"
    assert qs["PQ67"].gold_answer == ""


def test_ground_truth_and_evidence(published: Path) -> None:
    corpus, _ = load_published(published, CORPUS)
    qs = {q.id: q for q in corpus.questions}
    texts = {p.id: p.text for p in corpus.papers}

    pq1 = qs["PQ1"]
    assert pq1.gold_answer.startswith("RAPTOR builds a tree of summaries.")
    assert "---" not in pq1.gold_answer
    assert pq1.must_have == (
        'RAPTOR builds a tree bottom-up: "recursively embeds, clusters and summarizes chunks of '
        'text"',
        "The tree has multiple levels of abstraction",
    )
    quote = "recursively embeds, clusters and summarizes chunks of text"
    start = RAPTOR.find(quote)
    assert pq1.evidence == (EvidenceSpan("05_raptor", start, start + len(quote)),)
    ev = pq1.evidence[0]
    assert texts[ev.paper_id][ev.start : ev.end] == quote

    pq2 = qs["PQ2"]
    assert len(pq2.must_have) == 2
    [ev2] = pq2.evidence  # the second quote is not in the paper
    assert (
        texts["19_longmemeval"][ev2.start : ev2.end] == "LongMemEval contains 500 curated questions"
    )

    pq3 = qs["PQ3"]
    assert pq3.gold_answer.startswith("RAPTOR summarises; MemGPT pages.")
    # the sub-bullet quote belongs to its parent fact, and a fully quoted fact is unquoted
    assert pq3.must_have == ("MemGPT treats context as memory", "RAPTOR uses trees")
    [ev3] = pq3.evidence
    assert ev3.paper_id == "07_memgpt"
    assert ev3.start == MEMGPT.find("treats the context window")


def test_problems_are_reported(published: Path) -> None:
    _, problems = load_published(published, CORPUS)
    gt, q = f"benchmarks/{CORPUS}/ground_truth.md", f"benchmarks/{CORPUS}/queries.md"

    def has(*parts: str) -> bool:
        return any(all(p in line for p in parts) for line in problems)

    assert has(q, "PQ2", "unknown type 'telepathic'")
    assert has(q, "PQ2", "#42", "no full_text paper")
    assert has(q, "PQ3", "Difficulty L3 disagrees with heading L2")
    assert has(q, "PQ4", "no resolvable source paper", "skipped")
    assert has(gt, "PQ2", "quote not found", "this sentence is not in the paper")
    assert has(f"benchmarks/{CORPUS}/ground_truth_holdout.md", "PQ67", "no ground truth")
    assert not has("PQ1")  # everything about PQ1 parsed
    assert has(q, "PQ4", "#99", "no full_text paper")
    assert has(f"benchmarks/{CORPUS}/ground_truth_holdout.md", "no ground-truth sections found")
    assert len(problems) == 8, problems


def test_missing_holdout_is_a_problem_not_an_error(published: Path) -> None:
    bench = published / "benchmarks" / CORPUS
    (bench / "queries_holdout.md").unlink()
    (bench / "ground_truth_holdout.md").unlink()
    corpus, problems = load_published(published, CORPUS)
    assert [q.id for q in corpus.questions] == ["PQ1", "PQ2", "PQ3"]
    assert any("queries_holdout.md" in p and "absent" in p for p in problems)


@pytest.mark.parametrize(
    ("relpath", "what"),
    [
        (f"datasets/{CORPUS}/full_text", "directory does not exist"),
        (f"benchmarks/{CORPUS}/queries.md", "missing benchmark file"),
        (f"benchmarks/{CORPUS}/ground_truth.md", "missing benchmark file"),
        (f"benchmarks/{CORPUS}/ground_truth_holdout.md", "missing benchmark file"),
    ],
)
def test_missing_paths_raise(published: Path, relpath: str, what: str) -> None:
    target = published / relpath
    if target.is_dir():
        for f in target.iterdir():
            f.unlink()
        target.rmdir()
    else:
        target.unlink()
    with pytest.raises(DataError, match=what) as err:
        load_published(published, CORPUS)
    assert err.value.file == str(target)


def test_unknown_corpus_raises(published: Path) -> None:
    with pytest.raises(DataError, match="public_transformers"):
        load_published(published, "public_transformers")


@pytest.mark.parametrize(
    "header",
    ["## PQ7", "### PQ7: Short title", "**PQ7**", "**PQ7: Short title**", "PQ7 — Short title"],
)
def test_ground_truth_header_styles(header: str) -> None:
    text = f"# GT\n\n{header}\n\nThe answer.\n\n- fact one\n- fact two\n\n## PQ8\n\n- other\n"
    sections = _parse_ground_truth(text, "gt.md", [])
    assert sections["PQ7"] == "The answer.\n\n- fact one\n- fact two"
    assert sections["PQ8"] == "- other"


def test_tier_heading_is_not_a_ground_truth_section() -> None:
    text = "## L1 — Easy\n\n### PQ1\n\n- a fact\n\n## L2 — Medium\n\nintro\n\n### PQ2\n\n- b\n"
    problems: list[str] = []
    sections = _parse_ground_truth(text, "gt.md", problems)
    assert sections == {"PQ1": "- a fact", "PQ2": "- b"}
    assert problems == []
