"""Markdown and CSV renderings of result rows, shared by every table the workflow writes."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from srb.atomic import atomic_write


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    def fmt(v: Any) -> str:
        return "–" if v is None else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    csv_out: str | Path,
    md_out: str | Path,
    title: str,
    note: str,
) -> None:
    with atomic_write(csv_out) as fh:
        writer = csv.DictWriter(fh, fieldnames=list(columns), extrasaction="ignore",
                                lineterminator="\n")  # fmt: skip
        writer.writeheader()
        writer.writerows(rows)
    with atomic_write(md_out) as fh:
        fh.write(f"# {title}\n\n{note}\n\n")
        fh.write(markdown_table(rows, columns))
