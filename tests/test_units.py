"""Ingestion units: exact offsets, chunk windows, section-aware units, whole papers."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from srb.data.canonical import load_canonical
from srb.data.schema import Paper
from srb.systems import registry
from srb.units import (
    Unit,
    make_units,
    paper_units,
    section_aware_spans,
    section_spans,
    unit_from_dict,
    window_spans,
)

SHIPPED = Path(__file__).parents[1] / "resources" / "corpora" / "evidence-inference-ccby"


def words_text(n_words: int, seed: int = 0) -> str:
    """Deterministic prose-like text: words of 1-12 letters, some newlines."""
    rng = random.Random(seed)
    out = []
    for i in range(n_words):
        out.append("".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 12))))
        out.append("\n" if i % 17 == 16 else " ")
    return "".join(out)


def body(n_chars: int, seed: int = 0) -> str:
    """Text of exactly n_chars, ending with a newline, containing no heading lines."""
    text = words_text(n_chars, seed)[: n_chars - 1]
    return text + "\n"


def assert_exact(units: list[Unit], paper: Paper) -> None:
    for u in units:
        assert u.paper_id == paper.id
        assert 0 <= u.start < u.end <= len(paper.text)
        assert u.text == paper.text[u.start : u.end]


def assert_tiles(spans: list[tuple[int, int]], start: int, end: int) -> None:
    """Contiguous, non-overlapping, covering exactly [start, end)."""
    assert spans[0][0] == start
    assert spans[-1][1] == end
    for (_, e1), (s2, _) in zip(spans, spans[1:], strict=False):
        assert e1 == s2


# ---------------------------------------------------------------------- chunks


@pytest.mark.parametrize(("size", "overlap"), [(1000, 200), (300, 50), (128, 0), (60, 30)])
def test_chunk_windows_cover_text_with_configured_overlap(size: int, overlap: int) -> None:
    paper = Paper("p", "T", words_text(900, seed=size))
    units = paper_units(paper, "chunks", size, overlap)
    assert len(units) > 3
    assert_exact(units, paper)
    assert units[0].start == 0
    assert units[-1].end == len(paper.text)
    for u in units:
        assert len(u.text) <= size
        # snapping to whitespace moves an end back by at most 15% of the window
        if u.end < len(paper.text):
            assert len(u.text) >= size - int(size * 0.15)
    for a, b in zip(units, units[1:], strict=False):
        assert a.start < b.start  # progress
        assert b.start <= a.end  # no gap
        assert a.end - b.start == overlap  # window length >> overlap, so overlap is exact


def test_windows_without_whitespace_are_exact() -> None:
    assert list(window_spans("x" * 250, 100, 20)) == [(0, 100), (80, 180), (160, 250)]
    assert list(window_spans("x" * 100, 100, 20)) == [(0, 100)]


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (100, 100), (100, -1), (100, 150)])
def test_bad_window_parameters_raise(size: int, overlap: int) -> None:
    with pytest.raises(ValueError, match="overlap"):
        list(window_spans("some text", size, overlap))


def test_high_overlap_windows_are_never_nested() -> None:
    text = words_text(900, seed=50)
    spans = list(window_spans(text, 50, 45))  # accepted: 0 <= overlap < size
    for (s1, e1), (s2, e2) in zip(spans, spans[1:], strict=False):
        assert s2 > s1 and e2 > e1
    assert spans[-1][1] == len(text)


# ---------------------------------------------------------------------- sections

HEADINGS = ["ABSTRACT.METHODS:", "BODY.RESULTS:", "## Discussion", "BODY.CONCLUSIONS:"]


def sectioned_paper(
    section_chars: int, preamble: str = "TITLE: \nA trial\n\n"
) -> tuple[Paper, list[int]]:
    """A preamble then one section per heading, each exactly `section_chars` long."""
    parts, starts, pos = [preamble], [], len(preamble)
    for i, heading in enumerate(HEADINGS):
        section = heading + "\n" + body(section_chars - len(heading) - 1, seed=i)
        starts.append(pos)
        parts.append(section)
        pos += len(section)
    return Paper("s", "", "".join(parts)), starts


def test_lowercase_or_midline_labels_do_not_start_sections() -> None:
    text = "Intro words.\nresults: lowercase label\nSee RESULTS: inline\n## Real heading\nmore\n"
    starts = [s for s, _ in section_spans(text)]
    assert starts == [0, text.index("## Real heading")]


def test_section_units_start_at_headings_when_sections_fit() -> None:
    paper, starts = sectioned_paper(300)
    assert starts[0] == 17  # the "TITLE:" preamble
    # 310 fits one section but never two (nor preamble + section): each heading starts a unit
    units = paper_units(paper, "sections", 310)
    assert_exact(units, paper)
    assert [u.start for u in units] == [0, *starts]
    assert [u.text.split("\n", 1)[0] for u in units[1:]] == [h.strip() for h in HEADINGS]
    assert all(len(u.text) <= 310 for u in units)
    assert_tiles([(u.start, u.end) for u in units], 0, len(paper.text))
    # 400 lets the short preamble merge into the first section; later units still start at headings
    units = paper_units(paper, "sections", 400)
    assert [u.start for u in units] == [0, *starts[1:]]
    assert units[0].text.startswith("TITLE: \nA trial\n\nABSTRACT.METHODS:\n")
    assert all(len(u.text) <= 400 for u in units)


def test_section_units_merge_consecutive_sections_greedily() -> None:
    paper, starts = sectioned_paper(100, preamble="")
    assert starts[0] == 0
    spans = section_aware_spans(paper.text, 250)
    assert spans == [(0, 200), (200, 400)]
    assert section_aware_spans(paper.text, 399) == [(0, 300), (300, 400)]
    assert section_aware_spans(paper.text, 10_000) == [(0, 400)]


def test_oversized_section_is_split_into_windows() -> None:
    pre = "## Intro\n" + body(91)
    big = "BODY.RESULTS:\n" + body(1500, seed=7)
    post = "## Discussion\n" + body(86)
    paper = Paper("p", "", pre + big + post)
    big_start, big_end = len(pre), len(pre) + len(big)
    units = paper_units(paper, "sections", 300)
    assert_exact(units, paper)
    assert all(len(u.text) <= 300 for u in units)
    spans = [(u.start, u.end) for u in units]
    assert spans[0] == (0, len(pre))
    assert spans[-1] == (big_end, len(paper.text))
    inner = spans[1:-1]
    assert len(inner) >= 5  # 1514 chars in <= 300-char windows
    assert_tiles(inner, big_start, big_end)
    assert paper.text[inner[0][0] :].startswith("BODY.RESULTS:")


def test_section_units_on_markdown_paper() -> None:
    text = "# Paper\n\nabstract words\n\n## Methods\n" + body(200) + "## Results\n" + body(200, 1)
    paper = Paper("md", "", text)
    units = paper_units(paper, "sections", 220)
    assert_exact(units, paper)
    assert [u.start for u in units] == [0, text.index("## Methods"), text.index("## Results")]


# ---------------------------------------------------------------------- paper, ids, blanks


def test_whole_paper_granularity_is_one_unit() -> None:
    paper = Paper("p9", "", words_text(3000))
    units = paper_units(paper, "paper")
    assert units == [Unit("p9#0", "p9", 0, len(paper.text), paper.text)]


def test_unit_ids_unique_and_numbered_per_paper() -> None:
    papers = [Paper(pid, "", words_text(400, i)) for i, pid in enumerate(["a", "a#1", "b"])]
    for gran in ("chunks", "sections", "paper"):
        units = make_units(papers, gran, 300, 50)
        ids = [u.id for u in units]
        assert len(ids) == len(set(ids))
        for p in papers:
            mine = [u for u in units if u.paper_id == p.id]
            assert [u.id for u in mine] == [f"{p.id}#{i}" for i in range(len(mine))]
            assert_exact(mine, p)


def test_whitespace_only_units_are_dropped() -> None:
    text = "alpha beta gamma " * 10 + " " * 3000 + "\n" + "delta epsilon " * 10
    paper = Paper("p", "", text)
    chunks = paper_units(paper, "chunks", 500, 0)
    assert chunks and all(u.text.strip() for u in chunks)
    assert_exact(chunks, paper)
    assert [u.id for u in chunks] == [f"p#{i}" for i in range(len(chunks))]
    # windows over the blank stretch were produced, then dropped
    assert len(list(window_spans(text, 500, 0))) > len(chunks)
    # nothing but whitespace: no unit at any granularity
    blank = Paper("b", "", " \n\t  \n")
    for gran in ("chunks", "sections", "paper"):
        assert paper_units(blank, gran, 500, 0) == []


def test_whitespace_only_section_windows_are_dropped() -> None:
    text = "## A\nabc\n" + " " * 5000 + "\n## B\nxyz\n"
    paper = Paper("p", "", text)
    units = paper_units(paper, "sections", 1000)
    assert_exact(units, paper)
    assert all(u.text.strip() for u in units)
    assert units[0].start == 0 and units[0].text.startswith("## A\nabc")
    assert units[-1].text == "## B\nxyz\n"


def test_unit_dict_round_trip() -> None:
    u = Unit("p#0", "p", 3, 8, "hello")
    assert unit_from_dict(u.to_dict()) == u


# ---------------------------------------------------------------------- shipped corpus


@pytest.fixture(scope="module")
def shipped():
    return load_canonical(SHIPPED)


@pytest.mark.parametrize("system", sorted(registry()))
def test_units_on_shipped_corpus_have_exact_offsets(shipped, system: str) -> None:
    spec = registry()[system]
    units = make_units(shipped.papers, spec.granularity, spec.unit_chars, spec.overlap)
    papers = shipped.paper_index()
    assert len({u.id for u in units}) == len(units)
    by_paper: dict[str, list[Unit]] = {}
    for u in units:
        p = papers[u.paper_id]
        assert 0 <= u.start < u.end <= len(p.text)
        assert u.text == p.text[u.start : u.end], u.id
        by_paper.setdefault(u.paper_id, []).append(u)
    assert set(by_paper) == set(papers)
    for pid, mine in by_paper.items():
        text = papers[pid].text
        assert mine[0].start == 0
        assert mine[-1].end == len(text)
        if spec.granularity == "paper":
            assert len(mine) == 1
        elif spec.granularity == "chunks":
            assert all(len(u.text) <= spec.unit_chars for u in mine)
            for a, b in zip(mine, mine[1:], strict=False):
                assert a.end - b.start == spec.overlap
        else:
            assert all(len(u.text) <= spec.unit_chars for u in mine)
            assert_tiles([(u.start, u.end) for u in mine], 0, len(text))
            heads = {s for s, _ in section_spans(text)}
            prev_end = None
            for u in mine:
                # a unit starts at a heading, or continues a split oversized section
                assert u.start in heads or u.start == prev_end
                prev_end = u.end
    if spec.granularity == "paper":
        assert len(units) == len(shipped.papers) == 49
