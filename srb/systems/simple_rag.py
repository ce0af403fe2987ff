"""Simple RAG: ~1K-character overlapping chunks, the paper's plain retrieval baseline."""

from srb.systems.base import SystemSpec

SYSTEM = SystemSpec(
    name="simple_rag",
    description="~1K-char overlapping chunks (200 overlap), top-10 natively",
    granularity="chunks",
    unit_chars=1000,
    overlap=200,
    native_top_k=10,
)
