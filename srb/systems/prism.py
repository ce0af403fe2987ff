"""Prism, Theoria's ablation: the same five-pass typed claims, one RAPTOR tree and the typed
links, but no communities or theories; it answers by internal synthesis, so it is native only.

Its retrieval is the collapsed tree over every leaf and summary (no routing) plus one-hop links;
what it retrieves is answered with its own prompt (`llm.prompts.prism`) by the configured
synthesizer; the tables mark it as internal synthesis. Extraction requests are
Theoria's, so with Theoria in the grid they come from the cache.
"""

from __future__ import annotations

from pathlib import Path

from srb.systems.store import Endpoint, Item, StoreHandle
from srb.systems.theoria import TheoriaHandle, TheoriaSystem
from srb.theoria import build
from srb.theoria.models import EndpointModels
from srb.theoria.retrieve import retrieve


class PrismHandle(TheoriaHandle):
    def search(self, query: str, modality: str, knob: int) -> list[Item]:
        if modality != "native":
            raise ValueError(f"prism has no modality {modality!r} (native)")
        models = EndpointModels(self.endpoint)
        try:
            vector = models.embed([query])[0]
        finally:
            models.close()
        found = retrieve(self.db, vector, knob, self.system.opts, route=False)
        return [Item(r.item_id, r.text, r.paper_ids, r.kind, r.score, None, r.span) for r in found]


class PrismSystem(TheoriaSystem):
    name = "prism"
    description = (
        "Prism (Theoria ablation): typed claims + one RAPTOR tree + links, internal synthesis"
    )
    modalities = ("native",)
    native_knob = 25
    layers = build.PRISM_LAYERS
    bm25_fused = ()
    #: answers come from the system itself (its own prompt): native only, no budget sweep
    internal_synthesis = True
    #: its extraction, link and summary requests are Theoria's: ingested after it, they are
    #: answered from the call cache (rules/common.smk: ingest_after)
    reuses_requests_of = ("theoria",)

    def open(self, store_dir: Path, endpoint: Endpoint) -> StoreHandle:
        super().open(store_dir, endpoint).close()  # the same existence check
        return PrismHandle(self, store_dir, endpoint)


SYSTEM = PrismSystem()
