"""The pre-run doctor: the paper's six-line checklist, per corpus x system, before any ranking.

The paper lost runs to integrations that returned nothing and still "succeeded": a store that
pointed at an empty index, a hybrid whose BM25 channel was disabled, a unit count that did not
match the ingest log. Each check below is cheap (a few probe queries) and prints the numbers it
saw, so a failure reads as a diagnosis rather than a stack trace:

1. probe_context   a known-good probe query returns nonzero context in every modality;
2. budget_match    each budget, restored on the probes exactly as the cells are, restores
                   context, does not overspend, and moves with its knob (an off-budget probe
                   estimate is reported; every real cell is checked after restoration);
3. channels        lexical and dense channels are both enabled and both feed hybrid results;
4. unit_count      stored units (units file, Lucene, FAISS) equal the ingest log's count;
5. document_count  source documents behind the units equal the corpus manifest;
6. top_k_growth    raising top_k raises the restored size on a probe whose ranking is deep enough.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from srb.atomic import write_json
from srb.budget_check import cell_verdict, knob_inert
from srb.data.canonical import iter_jsonl, load_canonical
from srb.retrieve import (
    Hit,
    mean_unit_chars,
    parse_budget,
    restore_budget,
    restore_top_k,
    rrf,
    sort_hits,
)
from srb.systems import get_system
from srb.units import Unit, unit_from_dict

log = logging.getLogger(__name__)

CHANNELS = ("bm25", "dense")


class DoctorError(RuntimeError):
    """A failed pre-run check; the message names corpus, system, check and numbers seen."""


def doctor_status(report: Mapping[str, Any]) -> str:
    """One cell of a table: "ok", or "FAILED: <check>, <check>" for a report the run went on
    with (`memory.doctor_gate: warn`)."""
    if report.get("ok"):
        return "ok"
    failed = [c["name"] for c in report.get("checks", []) if c.get("ok") is False]
    return "FAILED: " + ", ".join(failed)


@dataclass
class Check:
    number: int
    name: str
    ok: bool | None  # None: not applicable here (said so in `message`)
    message: str
    seen: dict[str, Any] = field(default_factory=dict)


@dataclass
class Probe:
    id: str
    text: str


def probes_from_config(corpus_dir: str | Path, spec: int | Sequence[str]) -> list[Probe]:
    """Explicit probe texts, or the first N questions of the corpus (their answers are in it)."""
    if isinstance(spec, int):
        questions = load_canonical(corpus_dir).questions[:spec]
        return [Probe(q.id, q.question) for q in questions]
    return [Probe(f"probe-{i}", text) for i, text in enumerate(spec)]


def channel_hits(
    probes: Sequence[Probe],
    modalities: Sequence[str],
    bm25_index: str | Path | None,
    dense_index: str | Path | None,
    depth: int,
    bm25_params: Mapping[str, float],
    dense_cfg: Mapping[str, Any],
) -> dict[str, dict[str, list[Hit]]]:
    """Per channel the probes' rankings, searched exactly as the rank rules search."""
    qids, texts = [p.id for p in probes], [p.text for p in probes]
    needed = {c for m in modalities for c in (CHANNELS if m == "hybrid" else (m,))}
    out: dict[str, dict[str, list[Hit]]] = {}
    if "bm25" in needed and bm25_index is not None:
        from srb.index.lucene import BM25Searcher

        searcher = BM25Searcher(bm25_index, bm25_params["k1"], bm25_params["b"])
        out["bm25"] = {q: sort_hits(h) for q, h in searcher.search(texts, qids, depth).items()}
    if "dense" in needed and dense_index is not None:
        from srb.index.dense import open_dense_searcher

        searcher = open_dense_searcher(dense_index, dense_cfg, dense_cfg.get("threads", 1))
        found = searcher.search(texts, qids, depth, dense_cfg.get("batch_size", 32))
        out["dense"] = {q: sort_hits(h) for q, h in found.items()}
    return out


def store_counts(bm25_index: str | Path | None, dense_index: str | Path | None) -> dict[str, int]:
    counts: dict[str, int] = {}
    if bm25_index is not None:
        from srb.index.lucene import lucene_doc_count

        counts["bm25_index_units"] = lucene_doc_count(bm25_index)
    if dense_index is not None:
        import faiss

        counts["dense_index_units"] = int(
            faiss.read_index(str(Path(dense_index) / "index.faiss")).ntotal
        )
    return counts


class Doctor:
    """Runs the six checks on already-searched probes; pure apart from the inputs it is given."""

    def __init__(
        self,
        system: str,
        probes: Sequence[Probe],
        units: Mapping[str, Unit],
        hits: Mapping[str, Mapping[str, list[Hit]]],
        modalities: Sequence[str],
        hybrid_channels: Sequence[str],
        budgets: Sequence[str],
        mode: str,
        tolerance: float,
        rrf_k: int,
        depth: int,
    ):
        self.spec = get_system(system)
        self.probes, self.units = list(probes), units
        self.hits, self.modalities = hits, list(modalities)
        self.hybrid_channels = list(hybrid_channels)
        self.budgets, self.mode, self.tolerance = list(budgets), mode, tolerance
        self.rrf_k, self.depth = rrf_k, depth
        self._rankings: dict[tuple[str, str], list[Hit]] = {}

    def ranking(self, modality: str, probe: Probe) -> list[Hit]:
        """The probe's ranking as the rank rules build it, minus ids the units file lacks
        (those are counted by the channels check); fused once, then reused by every check."""
        key = (modality, probe.id)
        if key not in self._rankings:
            self._rankings[key] = self._rank(modality, probe)
        return self._rankings[key]

    def _rank(self, modality: str, probe: Probe) -> list[Hit]:
        if modality == "hybrid":
            runs = [self.hits[c][probe.id] for c in self.hybrid_channels if c in self.hits]
            ranked = rrf(runs, k=self.rrf_k, depth=self.depth) if runs else []
        else:
            ranked = self.hits.get(modality, {}).get(probe.id, [])
        return [h for h in ranked if h[0] in self.units]

    def restored_chars(self, modality: str, probe: Probe, top_k: int) -> int:
        ranking = self.ranking(modality, probe)
        return restore_top_k(probe.id, ranking, self.units, top_k, None).achieved_chars

    def probe_context(self) -> Check:
        k = self.spec.native_top_k
        seen = {
            m: {p.id: self.restored_chars(m, p, k) for p in self.probes} for m in self.modalities
        }
        empty = [f"{m}:{pid}" for m, per in seen.items() for pid, c in per.items() if c == 0]
        if not self.probes:
            return Check(1, "probe_context", False, "no probe queries configured", seen)
        if empty:
            msg = f"probe queries returned no context at native top_k={k}: {', '.join(empty)}"
            return Check(1, "probe_context", False, msg, seen)
        low = min(c for per in seen.values() for c in per.values())
        return Check(
            1, "probe_context", True, f"every probe restored context (min {low} chars)", seen
        )

    def budget_match(self) -> Check:
        """Restore each budget on the probes exactly as the cells do (srb.retrieve.restore_budget,
        calibrated on the probes' native restorations) and judge it with the cells' verdict.

        A few probes estimate a cell's mean poorly, so an off-budget probe estimate is reported,
        not fatal: every real cell is checked after restoration (budget_gate). What fails here
        is what no corpus excuses: budgets that restore nothing, overspend, or an inert knob."""
        numeric = [b for b in self.budgets if parse_budget(b) is not None]
        if not numeric:
            return Check(2, "budget_match", None, "not applicable: only native budgets configured")
        if not self.probes:
            return Check(2, "budget_match", False, "no probe queries configured")
        seen: dict[str, Any] = {}
        bad, noted = [], []
        for m in self.modalities:
            rankings = {p.id: self.ranking(m, p) for p in self.probes}
            native = [
                restore_top_k(q, h, self.units, self.spec.native_top_k, None).to_record(self.units)
                for q, h in rankings.items()
            ]
            verdicts = {}
            for b in numeric:
                requested = parse_budget(b)
                assert requested is not None
                if self.mode == "calibrated" and mean_unit_chars(native) <= 0:
                    seen[f"{m}/{b}"] = {"requested": requested, "achieved_mean": 0, "ratio": 0.0}
                    bad.append(f"{m}/{b}: native probes restored nothing to calibrate on")
                    continue
                cells, calibration = restore_budget(
                    rankings, self.units, requested, self.mode, self.tolerance, native
                )
                verdict = cell_verdict(
                    cells, [len(rankings[c.question_id]) for c in cells], requested,
                    self.tolerance, calibration,
                )  # fmt: skip
                verdicts[b] = verdict
                per_probe = [c.achieved_chars / requested for c in cells]
                seen[f"{m}/{b}"] = {
                    "requested": requested,
                    "achieved_mean": round(verdict.achieved_mean, 1),
                    "ratio": round(verdict.ratio, 4),
                    "probe_ratio_min": round(min(per_probe), 4),
                    "probe_ratio_max": round(max(per_probe), 4),
                    "status": verdict.status,
                }
                if verdict.status in ("empty", "over_budget"):
                    bad.append(f"{m}/{b}: {verdict.status}: {verdict.reason}")
                elif verdict.status != "ok":
                    noted.append(f"{m}/{b}: {verdict.status}: {verdict.reason}")
            inert = knob_inert(verdicts, self.tolerance)
            if inert:
                bad.append(f"{m}: {inert}")
        if bad:
            return Check(2, "budget_match", False, "; ".join(bad), seen)
        msg = f"every budget restores context and follows its knob within {self.tolerance:.0%}"
        if noted:
            msg = (
                f"no inert or empty budget; probe estimates off by more than "
                f"{self.tolerance:.0%} (every real cell is checked after restoration): "
                + "; ".join(noted)
            )
        return Check(2, "budget_match", True, msg, seen)

    def channels(self) -> Check:
        needed = {c for m in self.modalities for c in (CHANNELS if m == "hybrid" else (m,))}
        seen: dict[str, Any] = {"hybrid_channels": self.hybrid_channels}
        problems = []
        for c in sorted(needed):
            total = sum(len(self.hits.get(c, {}).get(p.id, [])) for p in self.probes)
            unknown = sum(
                u not in self.units
                for p in self.probes
                for u, _ in self.hits.get(c, {}).get(p.id, [])
            )
            seen[f"{c}_hits"], seen[f"{c}_unknown_unit_ids"] = total, unknown
            if total == 0:
                problems.append(f"the {c} channel returned 0 hits on {len(self.probes)} probes")
            if unknown:
                problems.append(f"the {c} channel returned {unknown} unit ids the units file lacks "
                                "(a stale index)")  # fmt: skip
        if "hybrid" in self.modalities:
            disabled = [c for c in CHANNELS if c not in self.hybrid_channels]
            if disabled:
                problems.append(f"hybrid has the {' and '.join(disabled)} channel disabled "
                                f"(retrieval.hybrid_channels = {self.hybrid_channels})")  # fmt: skip
            k = self.spec.native_top_k
            contrib = dict.fromkeys(CHANNELS, 0)
            for p in self.probes:
                fused = [u for u, _ in self.ranking("hybrid", p)[:k]]
                for c in CHANNELS:
                    if c in self.hybrid_channels:
                        ranked = {u for u, _ in self.hits.get(c, {}).get(p.id, [])}
                        contrib[c] += sum(u in ranked for u in fused)
            seen["hybrid_units_from"] = contrib
            for c in CHANNELS:
                if c in self.hybrid_channels and contrib[c] == 0:
                    problems.append(f"the {c} channel contributed 0 of the hybrid top-{k} units")
        if problems:
            return Check(3, "channels", False, "; ".join(problems), seen)
        return Check(3, "channels", True, "every channel returns hits and feeds hybrid", seen)

    @staticmethod
    def unit_count(
        ingest: Mapping[str, Any], n_units_file: int, stores: Mapping[str, int]
    ) -> Check:
        seen = {"ingest_log_units": ingest.get("n_units"), "units_file": n_units_file, **stores}
        expected = ingest.get("n_units")
        off = {k: v for k, v in seen.items() if k != "ingest_log_units" and v != expected}
        if expected is None:
            return Check(4, "unit_count", False, "the ingest log has no n_units", seen)
        if off:
            detail = ", ".join(f"{k} {v}" for k, v in off.items())
            return Check(
                4, "unit_count", False, f"ingest log says {expected} units; {detail}", seen
            )
        return Check(4, "unit_count", True, f"{expected} units everywhere", seen)

    @staticmethod
    def document_count(manifest: Mapping[str, Any], units: Mapping[str, Unit]) -> Check:
        papers = len({u.paper_id for u in units.values()})
        seen = {"manifest_papers": manifest.get("n_papers"), "papers_with_units": papers}
        if manifest.get("n_papers") != papers:
            msg = f"the manifest lists {manifest.get('n_papers')} papers, the units come from {papers}"
            return Check(5, "document_count", False, msg, seen)
        return Check(5, "document_count", True, f"{papers} papers, as in the manifest", seen)

    def top_k_growth(self) -> Check:
        """Doubling top_k must grow the context on at least one probe whose ranking holds more
        than top_k units; probes with short rankings (rare terms, tiny corpora) cannot tell."""
        k = self.spec.native_top_k
        seen: dict[str, Any] = {}
        if not self.probes:
            return Check(6, "top_k_growth", False, "no probe queries configured", seen)
        flat = []
        for m in self.modalities:
            per: dict[str, Any] = {}
            for p in self.probes:
                if len(self.ranking(m, p)) <= k:
                    per[p.id] = f"ranking holds <= {k} units"
                    continue
                per[p.id] = {f"top_{k}": self.restored_chars(m, p, k),
                             f"top_{2 * k}": self.restored_chars(m, p, 2 * k)}  # fmt: skip
            seen[m] = per
            grew = [
                v for v in per.values() if isinstance(v, dict) and v[f"top_{2 * k}"] > v[f"top_{k}"]
            ]
            if not grew:
                measured = [v for v in per.values() if isinstance(v, dict)]
                why = (f"top_{k} {measured[0][f'top_{k}']} chars, top_{2 * k} "
                       f"{measured[0][f'top_{2 * k}']} chars" if measured
                       else f"no probe ranking holds more than {k} units")  # fmt: skip
                flat.append(f"{m}: {why}")
        if flat:
            return Check(6, "top_k_growth", False, "raising top_k did not grow the context: "
                         + "; ".join(flat), seen)  # fmt: skip
        return Check(6, "top_k_growth", True, f"top_{2 * k} restores more than top_{k}", seen)


def run_doctor(
    corpus: str,
    system: str,
    corpus_dir: str | Path,
    units_file: str | Path,
    ingest_log: str | Path,
    bm25_index: str | Path | None,
    dense_index: str | Path | None,
    settings: Mapping[str, Any],
    report: str | Path,
) -> dict[str, Any]:
    """Run the six checks, write the JSON report, and raise DoctorError if any failed.

    A failed run writes its report beside the declared output (`<system>.failed.json`), since
    Snakemake removes the outputs of a failed job and the numbers are what the user needs.
    """
    corpus_dir = Path(corpus_dir)
    manifest = json.loads((corpus_dir / "manifest.json").read_text())
    ingest = json.loads(Path(ingest_log).read_text())
    records = [r for _, r in iter_jsonl(Path(units_file))]
    units = {r["id"]: unit_from_dict(r) for r in records}  # len(records) also counts duplicates
    probes = probes_from_config(corpus_dir, settings["probes"])
    modalities = settings["modalities"]
    hits = channel_hits(
        probes, modalities, bm25_index, dense_index, settings["depth"],
        settings["bm25"], settings["dense"],
    )  # fmt: skip
    doc = Doctor(
        system, probes, units, hits, modalities, settings["hybrid_channels"],
        settings["budgets"], settings["mode"], settings["tolerance"],
        settings["rrf_k"], settings["depth"],
    )  # fmt: skip
    checks = [
        doc.probe_context(),
        doc.budget_match(),
        doc.channels(),
        Doctor.unit_count(ingest, len(records), store_counts(bm25_index, dense_index)),
        Doctor.document_count(manifest, units),
        doc.top_k_growth(),
    ]
    return finish_report(corpus, system, [asdict(p) for p in probes], checks, report)


def finish_report(
    corpus: str,
    system: str,
    probes: list[dict[str, Any]],
    checks: Sequence[Check],
    report: str | Path,
    gate: str = "fail",
) -> dict[str, Any]:
    """Log every check, then write the report; on a failure either raise DoctorError naming
    each failed check (the report written beside the output as `<system>.failed.json`, since
    Snakemake removes a failed job's outputs) or, with `gate: warn`, write it as the output."""
    failed = [c for c in checks if c.ok is False]
    result = {
        "corpus": corpus,
        "system": system,
        "ok": not failed,
        "gate": gate,
        "probes": probes,
        "checks": [asdict(c) for c in checks],
    }
    report = Path(report)
    failed_report = report.with_name(report.stem + ".failed.json")
    for c in checks:
        state = {True: "ok", False: "FAILED", None: "n/a"}[c.ok]
        log.info("check %d %s: %s - %s", c.number, c.name, state, c.message)
    lines = "\n".join(f"  check {c.number} ({c.name}): {c.message}" for c in failed)
    if failed and gate != "warn":
        write_json(failed_report, result)
        raise DoctorError(
            f"doctor: corpus {corpus}, system {system}: {len(failed)} of 6 checks failed\n"
            f"{lines}\n  full report: {failed_report}"
        )
    if failed:
        log.warning(
            "doctor: corpus %s, system %s: %d of 6 checks FAILED (gate: warn: the run goes on "
            "and the tables mark it)\n%s", corpus, system, len(failed), lines,
        )  # fmt: skip
    failed_report.unlink(missing_ok=True)
    write_json(report, result)
    return result
