"""The doctor's six checks for a memory system that owns its store (srb.systems.store).

The paper's silent failures were exactly store failures: Mem0's Qdrant path pointing at an
empty directory (search returned nothing, no exception), its BM25 hybrid silently disabled, a
stored-unit count that disagreed with the ingest log. Adapted checks, on probe questions of the
memory slice, through the same search path the cells use (srb.store.StoreRanker):

1. probe_context   every modality restores nonzero context for every probe at the native knob;
2. budget_match    each budget's calibrated knob restores context within tolerance, or is
                   marked (an overshooting knob, a store that holds too little), never empty;
3. channels        a fused modality gets hits from both the library's dense ranking and BM25;
4. item_count      items in the store = the exported items file = the ingest log's count;
5. document_count  papers with >= 1 item = the slice's papers; papers with none are listed and
                   fail the check above `max_failed_share`;
6. knob_growth     raising the knob grows the restored context on some probe.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from srb.data.schema import Question
from srb.doctor import Check, finish_report
from srb.retrieve import mean_unit_chars, parse_budget
from srb.store import StoreRanker, restore_calibrated

log = logging.getLogger(__name__)


class StoreDoctor:
    def __init__(
        self,
        ranker: StoreRanker,
        probes: Sequence[Question],
        budgets: Sequence[str],
        tolerance: float,
        max_failed_share: float,
    ):
        self.ranker, self.probes = ranker, list(probes)
        self.system = ranker.system
        self.budgets, self.tolerance = list(budgets), tolerance
        self.max_failed_share = max_failed_share
        # a fused modality without its BM25 channel cannot be searched: check 3 reports it
        self.searchable = [
            m for m in self.system.modalities if not (ranker.fused(m) and ranker.bm25 is None)
        ]

    def _restore(self, modality: str, knob: int, requested: int | None = None) -> list:
        return [
            self.ranker.restore(p.id, p.question, modality, knob, requested) for p in self.probes
        ]

    def probe_context(self) -> Check:
        k = self.system.native_knob
        if not self.probes:
            return Check(1, "probe_context", False, "no probe question lies in the memory slice")
        seen = {
            m: {c.question_id: c.achieved_chars for c in self._restore(m, k)}
            for m in self.searchable
        }
        empty = [f"{m}:{q}" for m, per in seen.items() for q, c in per.items() if c == 0]
        if empty:
            return Check(1, "probe_context", False, f"probes returned no context at "
                         f"{self.system.knob_name}={k}: {', '.join(empty)}", seen)  # fmt: skip
        low = min(c for per in seen.values() for c in per.values())
        return Check(1, "probe_context", True, f"every probe restored context (min {low} chars)",
                     seen)  # fmt: skip

    def budget_match(self) -> Check:
        numeric = [b for b in self.budgets if parse_budget(b) is not None]
        if not numeric:
            return Check(2, "budget_match", None, "not applicable: only native budgets configured")
        if not self.probes:
            return Check(2, "budget_match", False, "no probe question lies in the memory slice")
        seen: dict[str, Any] = {}
        bad, noted = [], []
        # a modality the system answers by itself has native cells only: nothing to calibrate
        for m in (m for m in self.searchable if not self.system.answers_itself(m)):
            native = [c.to_record(self.ranker.units) for c in
                      self._restore(m, self.system.native_knob)]  # fmt: skip
            mean_item = mean_unit_chars(native)
            for b in numeric:
                requested = parse_budget(b)
                assert requested is not None
                if mean_item <= 0:
                    bad.append(f"{m}/{b}: the native probes restored nothing to calibrate on")
                    continue
                calibrated = restore_calibrated(self.ranker, self.probes, m, requested,
                                                mean_item, self.tolerance)  # fmt: skip
                verdict = calibrated.verdict
                seen[f"{m}/{b}"] = {"knob": calibrated.knob_steps[-1], **verdict.to_dict()}
                if verdict.status in ("empty", "over_budget"):
                    bad.append(f"{m}/{b}: {verdict.status}: {verdict.reason}")
                elif verdict.status != "ok":
                    noted.append(f"{m}/{b}: {verdict.status}: {verdict.reason}")
        if bad:
            return Check(2, "budget_match", False, "; ".join(bad), seen)
        msg = f"every budget restores context within {self.tolerance:.0%} of B"
        if noted:
            msg = "no empty or overspent budget; marked: " + "; ".join(noted)
        return Check(2, "budget_match", True, msg, seen)

    def channels(self) -> Check:
        fused = [m for m in self.system.modalities if self.ranker.fused(m)]
        if not fused:
            return Check(3, "channels", None,
                         f"not applicable: {self.system.name} fuses no channel itself")  # fmt: skip
        if self.ranker.bm25 is None:
            return Check(3, "channels", False, f"{', '.join(fused)} fuses BM25 with the "
                         "library's ranking, but the BM25 channel is missing")  # fmt: skip
        depth = self.ranker.depth
        seen = {
            "dense": {
                p.id: len(self.ranker.handle.search(p.question, "dense", depth))
                for p in self.probes
            },  # fmt: skip
            "bm25": {p.id: len(self.ranker.bm25(p.question, depth)) for p in self.probes},
        }
        dead = [c for c, per in seen.items() if not any(per.values())]
        if dead:
            return Check(3, "channels", False, f"channel(s) {', '.join(dead)} returned nothing "
                         "for every probe: the hybrid would be single-channel", seen)  # fmt: skip
        return Check(3, "channels", True, "both channels feed the fused ranking", seen)

    @staticmethod
    def item_count(
        ingest: Mapping[str, Any],
        n_items_file: int,
        n_store: int,
        n_native: int | None,
        n_duplicates: int = 0,
    ) -> Check:
        """The export (store), the items file and the ingest log agree, and so does the store's
        own count (Qdrant's point count, Kuzu's node/edge count) when the library gives one;
        exact repeats the library stored (exported once) are counted once and named."""
        seen = {"ingest_log": ingest.get("items_stored"), "items_file": n_items_file,
                "store": n_store}  # fmt: skip
        if n_native is not None:
            seen["store_native"] = n_native
        counts = set(seen.values())
        if n_duplicates:
            seen["store_duplicates"] = n_duplicates
        if len(counts) != 1:
            return Check(4, "item_count", False, "item counts disagree: " +
                         ", ".join(f"{k} {v}" for k, v in seen.items()), seen)  # fmt: skip
        if not n_store:
            return Check(4, "item_count", False, "the store holds no item", seen)
        repeats = (
            f" ({n_duplicates} exact repeats in the store, exported once)" if n_duplicates else ""
        )
        return Check(4, "item_count", True, f"{n_store} items everywhere{repeats}", seen)

    def document_count(self, ingest: Mapping[str, Any], slice_papers: int) -> Check:
        without = list(ingest.get("papers_without_items", []))
        failed = [f["paper_id"] for f in ingest.get("failed", [])]
        seen = {"slice_papers": slice_papers, "ingested_papers": ingest.get("papers"),
                "papers_without_items": without, "papers_failed": failed}  # fmt: skip
        if ingest.get("papers") != slice_papers:
            return Check(5, "document_count", False, f"the slice holds {slice_papers} papers, "
                         f"the ingest log {ingest.get('papers')}", seen)  # fmt: skip
        share = len(set(without) | set(failed)) / slice_papers if slice_papers else 1.0
        msg = f"{slice_papers - len(without)} of {slice_papers} papers have items"
        if without:
            msg += f"; without items: {', '.join(without)}"
        if failed:
            msg += f"; ingest failed for: {', '.join(failed)}"
        if share > self.max_failed_share + 1e-9:
            return Check(5, "document_count", False,
                         f"{msg} (share {share:.2f} > max_failed_share {self.max_failed_share})",
                         seen)  # fmt: skip
        return Check(5, "document_count", True, msg, seen)

    def knob_growth(self) -> Check:
        k = self.system.native_knob
        seen: dict[str, Any] = {}
        flat = []
        for m in self.searchable:
            small = {c.question_id: c.achieved_chars for c in self._restore(m, 1)}
            large = {c.question_id: c.achieved_chars for c in self._restore(m, k)}
            seen[m] = {q: {f"{self.system.knob_name}_1": small[q],
                           f"{self.system.knob_name}_{k}": large[q]} for q in small}  # fmt: skip
            if not any(large[q] > small[q] for q in small):
                flat.append(m)
        if flat:
            return Check(6, "knob_growth", False, f"raising {self.system.knob_name} from 1 to {k} "
                         f"did not grow any probe's context: {', '.join(flat)}", seen)  # fmt: skip
        return Check(6, "knob_growth", True,
                     f"{self.system.knob_name}={k} restores more than 1", seen)  # fmt: skip


def run_store_doctor(
    corpus: str,
    doctor: StoreDoctor,
    ingest: Mapping[str, Any],
    n_items_file: int,
    slice_papers: int,
    report: str | Path,
    gate: str = "fail",
) -> dict[str, Any]:
    """Run the six checks, write the JSON report, raise DoctorError naming every failure.

    `gate: warn` writes a failed report to the declared output instead (with `"gate": "warn"`)
    and the run goes on; the failure is then shown beside the system in the diagnostics and the
    leaderboards (srb.doctor.doctor_status)."""
    handle = doctor.ranker.handle
    checks = [
        doctor.probe_context(),
        doctor.budget_match(),
        doctor.channels(),
        StoreDoctor.item_count(
            ingest,
            n_items_file,
            len(handle.items()),
            handle.native_count(),
            handle.duplicate_count(),
        ),  # fmt: skip
        doctor.document_count(ingest, slice_papers),
        doctor.knob_growth(),
    ]
    probes = [{"id": p.id, "text": p.question} for p in doctor.probes]
    return finish_report(corpus, doctor.system.name, probes, checks, report, gate)
