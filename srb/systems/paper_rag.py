"""Paper RAG: whole papers as units, the coarsest granularity (a retrieval-side Direct Read)."""

from srb.systems.base import SystemSpec

SYSTEM = SystemSpec(
    name="paper_rag",
    description="whole papers as units, top-1 natively",
    granularity="paper",
    unit_chars=0,
    native_top_k=1,
)
