"""Judged scores as a table the analyses share: cell -> question -> composite (None = invalid).

A cell is one synthesized grid point, written "system/modality/budget" ("simple_rag/hybrid/2K");
the LLM-only systems have one cell each, so "base" and "direct_read" name theirs. Pairing two
cells keeps the questions both scored validly and counts the rest, so a judge failure shrinks n
visibly instead of entering a mean as zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from srb.data.canonical import iter_jsonl
from srb.errors import ConfigError

Cell = tuple[str, str, str]  # system, modality, budget
LLM_ONLY = ("base", "direct_read")


def cell_label(cell: Cell) -> str:
    system, modality, budget = cell
    return system if system in LLM_ONLY else f"{system}/{modality}/{budget}"


def parse_cell(spec: str, grid: Sequence[Cell], where: str) -> Cell:
    """'simple_rag/hybrid/2K' or 'base' -> the grid cell; anything else is a ConfigError that
    says where it came from and what the grid holds."""
    spec = str(spec).strip()
    by_label = {cell_label(c): c for c in grid}
    if spec in by_label:
        return by_label[spec]
    known = ", ".join(sorted(by_label))
    raise ConfigError(f"{where}: {spec!r} is not a synthesized cell; known cells: {known}")


def resolve_system_budget(system: str, budget: str, grid: Sequence[Cell], where: str) -> Cell:
    """A votes-file pair: 'simple_rag/hybrid' at a budget, or an LLM-only system at its own cell."""
    system = system.strip()
    if system in LLM_ONLY:
        return parse_cell(system, grid, where)
    return parse_cell(f"{system}/{str(budget).strip()}", grid, where)


@dataclass
class ScoreTable:
    """composite scores per cell and question, None where the judge's answer was invalid."""

    scores: dict[Cell, dict[str, float | None]]
    judge: str

    @classmethod
    def load(cls, judge: str, cells: Iterable[tuple[Cell, str | Path]]) -> ScoreTable:
        table: dict[Cell, dict[str, float | None]] = {}
        for cell, path in cells:
            table[cell] = {
                r["question_id"]: (float(r["composite"]) if r["valid"] else None)
                for _, r in iter_jsonl(Path(path))
            }
        return cls(table, judge)

    @classmethod
    def from_grid(
        cls, judge: str, grid: Sequence[Sequence[str]], files: Sequence[str]
    ) -> ScoreTable:
        """Judgment files listed in grid order (as the rules list them)."""
        cells = [tuple(c) for c in grid]
        if len(cells) != len(files):
            raise ValueError(f"{len(files)} judgment files for {len(cells)} grid cells")
        return cls.load(judge, zip(cells, files, strict=True))  # type: ignore[arg-type]

    def valid(self, cell: Cell) -> dict[str, float]:
        return {q: s for q, s in self.scores.get(cell, {}).items() if s is not None}

    def paired(self, a: Cell, b: Cell) -> tuple[list[str], list[float], list[float], int]:
        """Questions both cells scored validly, their scores, and how many were left out."""
        va, vb = self.valid(a), self.valid(b)
        every = set(self.scores.get(a, {})) | set(self.scores.get(b, {}))
        common = sorted(set(va) & set(vb))
        return common, [va[q] for q in common], [vb[q] for q in common], len(every) - len(common)


def load_tiers(questions_file: str | Path) -> dict[str, str]:
    return {r["id"]: r["tier"] for _, r in iter_jsonl(Path(questions_file))}


def mean_or_none(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def rounded(row: Mapping[str, Any], digits: int = 3) -> dict[str, Any]:
    # + 0.0 turns a rounded -0.0 into 0.0
    return {k: round(v, digits) + 0.0 if isinstance(v, float) else v for k, v in row.items()}
