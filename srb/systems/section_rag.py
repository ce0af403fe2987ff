"""Section RAG: ~6K-character section-aware units, so a restored unit keeps its section whole."""

from srb.systems.base import SystemSpec

SYSTEM = SystemSpec(
    name="section_rag",
    description="~6K-char section-aware chunks, top-3 natively",
    granularity="sections",
    unit_chars=6000,
    native_top_k=3,
)
