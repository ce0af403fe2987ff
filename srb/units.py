"""Ingestion units: how a system cuts papers before indexing.

Every unit is a half-open character range [start, end) of one paper and its text is exactly
`paper.text[start:end]`, so any restored context can be traced back to the paper's characters
(which is what evidence recall and the judges' audits rely on).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from srb.data.schema import Paper

GRANULARITIES = ("chunks", "sections", "paper")

# A heading line: markdown "# ..." or an all-caps label such as "ABSTRACT.METHODS:" / "BODY.RESULTS:".
_HEADING = re.compile(r"^(?:#{1,6}[ \t]+\S.*|[A-Z][A-Z0-9 .,/&()'\-]{2,80}:[ \t]*)$", re.MULTILINE)


@dataclass(frozen=True)
class Unit:
    """A retrievable unit. Store systems' items (rewritten text: facts, graph edges) have no
    span (`start`/`end` None) and may come from several papers (`paper_ids`)."""

    id: str
    paper_id: str
    start: int | None
    end: int | None
    text: str
    paper_ids: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.paper_ids:
            del out["paper_ids"]
        else:
            out["paper_ids"] = list(self.paper_ids)
        return out

    @property
    def sources(self) -> tuple[str, ...]:
        return self.paper_ids or (self.paper_id,)


def _snap_to_space(text: str, start: int, end: int, slack: float = 0.15) -> int:
    """Move a window's end back to the last whitespace within `slack` of its size, so chunks
    do not cut words; keeps the exact end if no whitespace is that close."""
    if end >= len(text):
        return len(text)
    floor = end - int((end - start) * slack)
    cut = max(text.rfind(" ", floor, end), text.rfind("\n", floor, end))
    return cut + 1 if cut > start else end


def window_spans(text: str, size: int, overlap: int, offset: int = 0) -> Iterator[tuple[int, int]]:
    """Overlapping windows of about `size` characters covering all of `text`."""
    if size <= 0 or not 0 <= overlap < size:
        raise ValueError(
            f"need size > 0 and 0 <= overlap < size, got size={size} overlap={overlap}"
        )
    n, start = len(text), 0
    while start < n:
        raw_end = min(start + size, n)
        end = _snap_to_space(text, start, raw_end)
        if end < n and end - overlap <= start:  # snapping would nest the next window in this one
            end = raw_end
        yield offset + start, offset + end
        if end >= n:
            break
        start = max(end - overlap, start + 1)


def section_spans(text: str) -> list[tuple[int, int]]:
    """Split at heading lines; the text before the first heading is its own section."""
    starts = sorted({0, *(m.start() for m in _HEADING.finditer(text))})
    return [(s, e) for s, e in zip(starts, [*starts[1:], len(text)], strict=True) if e > s]


def section_aware_spans(text: str, max_chars: int) -> list[tuple[int, int]]:
    """Greedily merge consecutive sections up to `max_chars`; split oversized ones into windows."""
    spans: list[tuple[int, int]] = []
    cur_start: int | None = None
    cur_end = 0
    for s, e in section_spans(text):
        if e - s > max_chars:
            if cur_start is not None:
                spans.append((cur_start, cur_end))
                cur_start = None
            spans.extend(window_spans(text[s:e], max_chars, 0, offset=s))
            continue
        if cur_start is not None and e - cur_start > max_chars:
            spans.append((cur_start, cur_end))
            cur_start = None
        if cur_start is None:
            cur_start = s
        cur_end = e
    if cur_start is not None:
        spans.append((cur_start, cur_end))
    return spans


def paper_units(paper: Paper, granularity: str, size: int = 1000, overlap: int = 200) -> list[Unit]:
    text = paper.text
    if granularity == "chunks":
        spans = list(window_spans(text, size, overlap))
    elif granularity == "sections":
        spans = section_aware_spans(text, size)
    elif granularity == "paper":
        spans = [(0, len(text))]
    else:
        raise ValueError(f"unknown granularity {granularity!r}; expected one of {GRANULARITIES}")
    units = []
    for s, e in spans:
        if text[s:e].strip():
            units.append(Unit(f"{paper.id}#{len(units)}", paper.id, s, e, text[s:e]))
    return units


def make_units(
    papers: Iterable[Paper], granularity: str, size: int = 1000, overlap: int = 200
) -> list[Unit]:
    return [u for p in papers for u in paper_units(p, granularity, size, overlap)]


def unit_from_dict(rec: dict[str, Any]) -> Unit:
    return Unit(
        rec["id"],
        rec["paper_id"],
        rec["start"],
        rec["end"],
        rec["text"],
        tuple(rec.get("paper_ids") or ()),
    )
