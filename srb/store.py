"""Ingest into and restore from memory systems that own their store (srb.systems.store).

Ingest: every paper of the memory slice goes into a staging store through the library, with
every model call on the caching endpoint; a paper that raises is retried a bounded number of
times, then recorded as failed (never silently dropped). The finished store is moved into place
only when ingest ends, and everything stored is exported as items in the units format, so BM25,
restore, diagnostics, synthesis and judging treat them like any system's units.

Restore: every (modality, budget) cell re-queries the already-ingested store with the library's
own knob; budgeted knobs are calibrated from the native run's mean characters per item, the
achieved size is checked against the budget (srb.budget_check) and an overshooting knob is
reported (`knob_limited`), as the paper reported Graphiti's per-channel limits.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from srb.atomic import atomic_directory, write_json, write_jsonl
from srb.budget_check import (
    BudgetVerdict,
    apply_gate,
    cell_verdict,
    knob_limited,
    mark_knob_flat,
)
from srb.data.schema import Corpus, Paper, Question
from srb.retrieve import (
    Calibration,
    Hit,
    Restored,
    budget_cap,
    cap_restored,
    mean_unit_chars,
    parse_budget,
    restore_packed,
    rrf,
)
from srb.systems.store import Endpoint, Item, StoreHandle, StoreSystem
from srb.units import Unit

log = logging.getLogger(__name__)


def memory_slice(corpus: Corpus, n_papers: int | None) -> tuple[list[Paper], list[Question]]:
    """The `n_papers` shortest papers (ties by id; all when None) and the questions whose source
    papers all lie among them: LLM ingest is the costly step, so the default runs a slice."""
    papers = sorted(corpus.papers, key=lambda p: (len(p.text), p.id))
    chosen = papers if n_papers is None else papers[:n_papers]
    ids = {p.id for p in chosen}
    questions = [q for q in corpus.questions if set(q.paper_ids) <= ids]
    return sorted(chosen, key=lambda p: p.id), questions


# ---------------------------------------------------------------------------------- ingest


@dataclass
class PaperIngest:
    paper_id: str
    chars: int
    attempts: int
    reported_items: int | None
    error: str | None
    seconds: float
    exported_items: int = 0


@contextmanager
def memory_endpoint(
    llm: Mapping[str, Any],
    model: str,
    dense: Mapping[str, Any],
    max_completion_tokens: int | None = None,
    bound_schemas: bool | tuple[int, int] = False,
    max_whitespace_run: int | None = None,
) -> Iterator[tuple[Endpoint, Any]]:
    """The caching endpoint for `model` (chat) and the configured encoder (embeddings); the
    answer-shaping settings are a store system's `endpoint_settings()`. With
    `dense["encoder_service"]` the encoder's misses are computed by the shared encoder service
    (srb.index.encoder_service), at the model server's CPU priority."""
    from srb.index.dense import Encoder
    from srb.index.encoder_service import EncoderService
    from srb.llm.proxy import Embedder, serve_endpoint
    from srb.llm.session import open_client

    client, _ = open_client(dict(llm), model)
    encoder = Encoder(dense["encoder"], threads=1, cache_path=dense.get("cache"))
    if dense.get("encoder_service") and llm.get("servers_dir"):
        encoder.service = EncoderService(
            dense["encoder"], llm["servers_dir"], fingerprint=getattr(encoder, "fingerprint", None)
        )
    embedder = Embedder(encoder, dense["encoder"])
    with serve_endpoint(
        client, embedder, max_completion_tokens, bound_schemas, max_whitespace_run
    ) as server:
        yield Endpoint(server.base_url, model, dense["encoder"], encoder.dim), server


def endpoint_dense(dense: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any]:
    """A store job's `dense` params plus `dense.encoder_service` from the config: it decides
    only where vectors are computed, not what they are, so it is no rule param (changing it
    reruns nothing)."""
    return {**dense, "encoder_service": bool(config["dense"].get("encoder_service", False))}


def bm25_channel(
    index: str | Path | None, params: Mapping[str, float]
) -> Callable[[str, int], list[Hit]] | None:
    """Pyserini BM25 over a store's exported items as a (query, depth) -> hits channel."""
    if not index:
        return None
    from srb.index.lucene import BM25Searcher

    searcher = BM25Searcher(index, params["k1"], params["b"])
    return lambda query, depth: searcher.search([query], ["q"], depth, 1)["q"]


@contextmanager
def opened_store(
    system: StoreSystem,
    store_dir: str | Path,
    llm: Mapping[str, Any],
    memory: Mapping[str, Any],
    dense: Mapping[str, Any],
) -> Iterator[StoreHandle]:
    """A finished store opened for search, with its caching endpoint (embeddings of queries);
    the pins are checked first, so a missing library is named with its env file."""
    system.check_installed()
    system.services = {"llm": dict(llm), "dense": dict(dense)}
    with memory_endpoint(llm, memory["llm"], dense, **system.endpoint_settings()) as (endpoint, _):
        handle = system.open(Path(store_dir), endpoint)
        try:
            yield handle
        finally:
            handle.close()


def _ingest_one(
    system: StoreSystem, paper: Paper, store: Path, endpoint: Endpoint, retries: int
) -> PaperIngest:
    started = time.perf_counter()
    error = None
    for attempt in range(1, retries + 2):
        if attempt > 1:  # a retry starts from the store as it was before this paper
            system.forget_paper(paper, store, endpoint)
        try:
            n = system.ingest_paper(paper, store, endpoint)
            log.info("%s: paper %s: %d item(s) (attempt %d)", system.name, paper.id, n, attempt)
            return PaperIngest(
                paper.id, len(paper.text), attempt, n, None, time.perf_counter() - started
            )
        except Exception as exc:  # the library's failure: retried, then recorded and counted
            error = f"{type(exc).__name__}: {exc}"
            log.warning(
                "%s: paper %s failed (attempt %d/%d): %s\n%s",
                system.name,
                paper.id,
                attempt,
                retries + 1,
                error,
                traceback.format_exc(limit=3),
            )
    system.forget_paper(paper, store, endpoint)  # a failed paper leaves no items behind
    return PaperIngest(
        paper.id, len(paper.text), retries + 1, None, error, time.perf_counter() - started
    )


PROGRESS_EVERY_S = 60.0


@contextmanager
def _progress(
    name: str,
    total: int,
    done: Sequence[PaperIngest],
    stats: Callable[[], dict[str, int]],
    started: float,
    every: float = PROGRESS_EVERY_S,
) -> Iterator[None]:
    """A line in the job's log every `every` seconds while papers ingest: a library that
    takes many minutes per paper (one synchronous retain) still shows that it moves."""
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(every):
            calls = stats()
            log.info(
                "%s: %d/%d paper(s) done after %.0f s; endpoint so far: %d chat request(s), "
                "%d model call(s), %d completion token(s)",
                name, len(done), total, time.perf_counter() - started,
                calls.get("chat_requests", 0), calls.get("model_calls", 0),
                calls.get("completion_tokens", 0),
            )  # fmt: skip

    thread = threading.Thread(target=report, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def ingest_store(
    system: StoreSystem,
    papers: Sequence[Paper],
    store_dir: str | Path,
    items_out: str | Path,
    log_out: str | Path,
    endpoint: Endpoint,
    stats: Callable[[], dict[str, int]],
    retries: int = 2,
    concurrency: int = 1,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Ingest `papers` into a new store at `store_dir`; write the items and the ingest log."""
    system.check_installed()
    started = time.perf_counter()
    with atomic_directory(store_dir) as staging:
        system.prepare(staging, endpoint)
        try:
            workers = max(1, concurrency if system.concurrent_papers else 1)
            done: list[PaperIngest] = []

            def one(paper: Paper) -> PaperIngest:
                outcome = _ingest_one(system, paper, staging, endpoint, retries)
                done.append(outcome)
                return outcome

            with (
                _progress(system.name, len(papers), done, stats, started),
                ThreadPoolExecutor(workers) as pool,
            ):
                outcomes = list(pool.map(one, papers))
            ingested = {o.paper_id for o in outcomes if not o.error}
            system.settle(staging, endpoint, [p for p in papers if p.id in ingested])
            live = system.live_items(staging, endpoint)
        finally:
            system.finish(staging, endpoint)
        system_report = system.ingest_report(staging)
        items = live if live is not None else _exported_items(system, staging, endpoint)
        # a paper "has items" when something was extracted from it: an episode (Graphiti's
        # copy of the raw paper) is stored whatever the extraction did, so it does not count
        per_paper: dict[str, int] = {}
        for item in items:
            if item.kind == "episode":
                continue
            for pid in item.paper_ids:
                per_paper[pid] = per_paper.get(pid, 0) + 1
        for o in outcomes:
            o.exported_items = per_paper.get(o.paper_id, 0)
        calls = stats()
        if calls.get("internal_errors"):
            raise RuntimeError(
                f"{system.name}: the caching endpoint failed {calls['internal_errors']} time(s) "
                "itself (model server, encoder or cache; see the log above): the ingest is not "
                "trustworthy and nothing is written; a rerun replays what was cached"
            )
        if papers and not any(o.exported_items for o in outcomes):
            raise RuntimeError(
                f"{system.name}: nothing extracted from any of its {len(papers)} paper(s) "
                f"({len(items)} item(s) stored, {calls.get('model_calls', 0)} model call(s), "
                f"{calls.get('completion_tokens', 0)} completion token(s), "
                f"{calls.get('invalid_json_responses', 0)} invalid JSON answer(s); per paper: "
                + "; ".join(f"{o.paper_id}: {o.error or 'no items'}" for o in outcomes)
                + "): a store without facts would only fail later, in its BM25 index or cells; "
                "nothing is written, and a rerun replays what was cached"
            )
        write_jsonl(items_out, (i.to_unit_record() for i in items))
        failed = [o for o in outcomes if o.error]
        record = {
            "system": system.name,
            **dict(meta or {}),
            "papers": len(papers),
            "papers_failed": len(failed),
            "papers_without_items": sorted(o.paper_id for o in outcomes if not o.exported_items),
            "items_stored": len(items),
            "items_by_kind": _count_kinds(items),
            "model_calls": calls,
            "wall_s": round(time.perf_counter() - started, 1),
            "per_paper": [asdict(o) for o in outcomes],
            "system_report": system_report,
            "failed": [{"paper_id": o.paper_id, "error": o.error} for o in failed],
        }
        write_json(log_out, record)
    log.info(
        "%s: %d item(s) from %d paper(s), %d failed, %s",
        system.name,
        len(items),
        len(papers),
        len(failed),
        record["model_calls"],
    )
    return record


def _exported_items(system: StoreSystem, store: Path, endpoint: Endpoint) -> list[Item]:
    """Everything in the finished store, through the system's own `open`."""
    handle = system.open(store, endpoint)
    try:
        return handle.items()
    finally:
        handle.close()


def _count_kinds(items: Sequence[Item]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for item in items:
        kinds[item.kind] = kinds.get(item.kind, 0) + 1
    return dict(sorted(kinds.items()))


# ---------------------------------------------------------------------------------- restore


class StoreRanker:
    """One modality's ranking of a query at a knob value: the library's own search, or for a
    modality the workflow fuses (Mem0 + BM25) RRF of the library's ranking and Pyserini BM25
    over the exported items, cut at the knob."""

    def __init__(
        self,
        system: StoreSystem,
        handle: StoreHandle,
        units: Mapping[str, Unit],
        bm25: Callable[[str, int], list[Hit]] | None = None,
        depth: int = 100,
        rrf_k: int = 60,
    ):
        self.system, self.handle, self.units = system, handle, units
        self.bm25, self.depth, self.rrf_k = bm25, depth, rrf_k

    def fused(self, modality: str) -> bool:
        return modality in getattr(self.system, "bm25_fused", ())

    def rank(self, query: str, modality: str, knob: int) -> list[Hit]:
        if not self.fused(modality):
            found = self.handle.search(query, modality, knob)
            return [(i.item_id, i.score) for i in found]
        if self.bm25 is None:
            raise ValueError(f"{self.system.name}/{modality} fuses BM25, but no BM25 index given")
        # both channels at least as deep as the knob, so a large budget is not cut by depth
        depth = max(self.depth, knob)
        dense = [(i.item_id, i.score) for i in self.handle.search(query, "dense", depth)]
        return rrf([dense, self.bm25(query, depth)], k=self.rrf_k, depth=knob)

    def restore(
        self, qid: str, query: str, modality: str, knob: int, requested: int | None
    ) -> Restored:
        hits = self.rank(query, modality, knob)
        unknown = [h[0] for h in hits if h[0] not in self.units]
        if unknown:
            raise ValueError(
                f"{self.system.name}/{modality}: the search returned item(s) the exported items "
                f"file does not hold ({', '.join(unknown[:3])}): store and export disagree"
            )
        return Restored(qid, hits, [self.units[h[0]].text for h in hits], requested, knob, False)


@dataclass(frozen=True)
class CalibratedCell:
    """A calibrated store cell: its capped cells, its verdict, and each knob value tried."""

    cells: list[Restored]
    verdict: BudgetVerdict
    knob_steps: tuple[int, ...]


def restore_calibrated(
    ranker: StoreRanker,
    questions: Sequence[Question],
    modality: str,
    requested: int,
    native_mean_item: float,
    tolerance: float,
) -> CalibratedCell:
    """One calibrated cell, the path the cells and the doctor share.

    The knob starts at the paper's calibration (B / the native run's mean characters per item).
    A store's items at a small knob need not be the native run's average items (Graphiti's
    top edges are shorter than its nodes), so a cell that lands under budget, with no question
    out of items, re-aims the knob from its own mean characters per item, up to the system's
    `knob_refine_steps` times (0 = the paper's single calibration). Every knob value tried is
    recorded in the verdict; what the cap cuts off an overshooting knob is marked as before."""
    system = ranker.system
    cap = budget_cap(requested, tolerance)
    knob = system.calibrated_knob(requested, native_mean_item)
    steps = [knob]
    while True:
        raw = [ranker.restore(q.id, q.question, modality, knob, requested) for q in questions]
        cells = [cap_restored(c, cap) for c in raw]
        calibration = Calibration(requested, native_mean_item, knob, cap)
        # a store's result list is as long as the library made it: "ran short" = fewer
        # items than the knob asked for, so the store held no more
        verdict = cell_verdict(cells, system.ranking_lengths(raw), requested, tolerance,
                               calibration)  # fmt: skip
        knob_mean = sum(c.achieved_chars for c in raw) / max(1, len(raw))
        verdict = knob_limited(verdict, knob_mean, tolerance, native_mean_item)
        if verdict.status != "under_budget" or len(steps) > system.knob_refine_steps():
            break
        next_knob = system.refined_knob(knob, requested, knob_mean)
        if next_knob <= knob:
            break
        log.info("%s/%s budget %d: knob %d restored %.0f chars on average; re-aimed to %d",
                 system.name, modality, requested, knob, knob_mean, next_knob)  # fmt: skip
        knob = next_knob
        steps.append(knob)
    if len(steps) > 1:
        tried = " -> ".join(str(k) for k in steps)
        verdict = replace(verdict, knob_steps=tuple(steps),
                          reason=f"{verdict.reason} (knob re-aimed {tried})")  # fmt: skip
    return CalibratedCell(cells, verdict, tuple(steps))


def restore_store_cells(
    ranker: StoreRanker,
    questions: Sequence[Question],
    modality: str,
    budgets: Sequence[str],
    mode: str,
    cell_outs: Sequence[str | Path],
    verdict_outs: Sequence[str | Path],
    tolerance: float = 0.25,
    gate: str = "fail",
    where: str = "",
) -> dict[str, BudgetVerdict | None]:
    """Every budget's cell of one store system/modality, each with its verdict (see module)."""
    system = ranker.system
    native = [
        ranker.restore(q.id, q.question, modality, system.native_knob, None) for q in questions
    ]
    native_records = [c.to_record(ranker.units) for c in native]
    verdicts: dict[str, BudgetVerdict | None] = {}
    for budget, cell_out, verdict_out in zip(budgets, cell_outs, verdict_outs, strict=True):
        requested = parse_budget(budget)
        if requested is None:
            write_jsonl(cell_out, native_records)
            write_json(verdict_out, {"requested": None, "status": "native",
                                     system.knob_name: system.native_knob})  # fmt: skip
            verdicts[budget] = None
            continue
        if mode == "pack":
            deep = [ranker.restore(q.id, q.question, modality, ranker.depth, requested)
                    for q in questions]  # fmt: skip
            cells = [restore_packed(c.question_id, c.hits, ranker.units, requested) for c in deep]
            verdict = cell_verdict(cells, [len(c.hits) for c in deep], requested, tolerance)
        else:
            calibrated = restore_calibrated(
                ranker, questions, modality, requested, mean_unit_chars(native_records), tolerance
            )
            cells, verdict = calibrated.cells, calibrated.verdict
        write_jsonl(cell_out, (c.to_record(ranker.units) for c in cells))
        verdicts[budget] = verdict
    # the library's knob across budgets: one that does not move the size marks every cell
    verdicts = mark_knob_flat(verdicts, tolerance)
    for (budget, verdict), verdict_out in zip(verdicts.items(), verdict_outs, strict=True):
        if verdict is None:
            continue
        write_json(verdict_out, verdict.to_dict())
        log.info(
            "%s budget %s: %s (%s)", where or system.name, budget, verdict.status, verdict.reason
        )
    apply_gate(verdicts, gate, where or system.name)
    return verdicts
