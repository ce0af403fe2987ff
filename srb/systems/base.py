"""What a retrieval-backed memory system declares about itself.

The workflow only needs a system's ingestion granularity and its native depth; everything else
(indices, modalities, budgets) is shared machinery. A system whose ingestion is not unit-based
(a memory store that rewrites papers into facts) overrides that in its own module and rule file.
"""

from __future__ import annotations

from dataclasses import dataclass

from srb.units import GRANULARITIES


@dataclass(frozen=True)
class SystemSpec:
    name: str
    description: str
    granularity: str
    unit_chars: int = 1000
    overlap: int = 0
    native_top_k: int = 5

    def __post_init__(self) -> None:
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"system {self.name}: unknown granularity {self.granularity!r}")
        if self.native_top_k < 1:
            raise ValueError(f"system {self.name}: native_top_k must be >= 1")
