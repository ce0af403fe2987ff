"""The store-system pipeline (srb.store, srb.store_doctor) around a stand-in store.

The stand-in is a tiny JSON-file store whose "library" splits papers into sentences; it exists
only to test the code around real libraries: retries and failure records, the staged store, the
export, per-budget re-querying with the knob, the knob_limited verdict, and the doctor's
planted faults. The real libraries are tested in tests/test_mem0_system.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from srb.budget_check import BudgetError
from srb.data.canonical import iter_jsonl
from srb.data.schema import Corpus, EvidenceSpan, Paper, Question
from srb.doctor import DoctorError
from srb.errors import ConfigError
from srb.ingest import read_units
from srb.ingest_cost import ingest_cost_table
from srb.store import (
    StoreRanker,
    ingest_store,
    memory_slice,
    restore_calibrated,
    restore_store_cells,
)
from srb.store_doctor import StoreDoctor, run_store_doctor
from srb.systems.store import Endpoint, Item, StoreHandle, StoreSystem, check_pins
from srb.units import Unit

ENDPOINT = Endpoint("http://127.0.0.1:1/v1", "chat", "minilm", 384)


class SentenceHandle(StoreHandle):
    def __init__(self, store: Path, per_channel: bool):
        self.records = [json.loads(line) for f in sorted(store.glob("*.jsonl"))
                        for line in f.read_text().splitlines()]  # fmt: skip
        self.per_channel = per_channel

    def items(self) -> list[Item]:
        return [Item(r["id"], r["text"], (r["paper"],)) for r in self.records]

    def search(self, query: str, modality: str, knob: int) -> list[Item]:
        words = set(query.lower().split())
        scored = sorted(
            ((len(words & set(r["text"].lower().split())), r["id"]) for r in self.records),
            key=lambda t: (-t[0], t[1]),
        )
        by_id = {r["id"]: r for r in self.records}
        n = 2 * knob if self.per_channel else knob  # a knob applied per channel overshoots
        return [Item(i, by_id[i]["text"], (by_id[i]["paper"],), score=float(s))
                for s, i in scored[:n]]  # fmt: skip


class SentenceStore(StoreSystem):
    name = "sentences"
    description = "stand-in store: one item per sentence"
    modalities = ("dense", "hybrid")
    bm25_fused = ("hybrid",)
    native_knob = 4
    knob_name = "top_k"
    requirements = "none.txt"

    def __init__(self, fail: dict[str, int] | None = None, per_channel: bool = False):
        self.fail = dict(fail or {})  # paper id -> how many attempts raise
        self.attempts: dict[str, int] = {}
        self.per_channel = per_channel

    def check_installed(self) -> None:
        pass

    def ingest_paper(self, paper: Paper, store_dir: Path, endpoint: Endpoint) -> int:
        self.attempts[paper.id] = self.attempts.get(paper.id, 0) + 1
        sentences = [s.strip() for s in paper.text.split(".") if s.strip()]
        failing = self.attempts[paper.id] <= self.fail.get(paper.id, 0)
        with open(store_dir / f"{paper.id}.jsonl", "a") as fh:  # a library that writes as it goes
            for i, s in enumerate(sentences):
                if failing and i == 1:
                    raise RuntimeError(f"library error on {paper.id}")
                fh.write(json.dumps({"id": f"{paper.id}-{i}", "paper": paper.id, "text": s}) + "\n")
        return len(sentences)

    def forget_paper(self, paper: Paper, store_dir: Path, endpoint: Endpoint) -> None:
        (store_dir / f"{paper.id}.jsonl").unlink(missing_ok=True)

    def open(self, store_dir: Path, endpoint: Endpoint) -> StoreHandle:
        return SentenceHandle(store_dir, self.per_channel)


def corpus() -> Corpus:
    papers = (
        Paper(
            "p1",
            "",
            "Aspirin lowered mortality. The trial enrolled 400 adults. Blood pressure fell.",
        ),
        Paper(
            "p2",
            "",
            "Statins reduced LDL cholesterol. Muscle pain was rare. Adherence was high. "
            "Follow-up lasted two years.",
        ),  # fmt: skip
        Paper("p3", "", "A much longer paper. " * 20),
    )
    questions = (
        Question(
            "q1",
            "Did aspirin lower mortality?",
            "",
            (),
            ("p1",),
            evidence=(EvidenceSpan("p1", 0, 26),),
        ),  # fmt: skip
        Question("q2", "Did statins reduce LDL cholesterol?", "", (), ("p2",)),
        Question("q3", "What about the long paper?", "", (), ("p3",)),
        Question("q4", "Aspirin and statins?", "", (), ("p1", "p2")),
    )
    return Corpus("tiny", papers, questions)


def test_memory_slice_takes_the_shortest_papers_and_their_whole_questions() -> None:
    papers, questions = memory_slice(corpus(), 2)
    assert [p.id for p in papers] == ["p1", "p2"]
    assert [q.id for q in questions] == ["q1", "q2", "q4"]
    papers, questions = memory_slice(corpus(), 1)
    assert [q.id for q in questions] == ["q1"]  # q4 also needs p2
    assert len(memory_slice(corpus(), None)[0]) == 3


def ingest(tmp_path: Path, system: SentenceStore, retries: int = 1) -> dict:
    papers, _ = memory_slice(corpus(), 2)
    stats = {"chat_requests": 3, "model_calls": 1, "prompt_tokens": 30,
             "completion_tokens": 6, "embedded_texts": 7}  # fmt: skip
    return ingest_store(system, papers, tmp_path / "store", tmp_path / "items.jsonl",
                        tmp_path / "ingest.json", ENDPOINT, lambda: stats, retries=retries,
                        concurrency=2)  # fmt: skip


def test_ingest_retries_then_records_a_failed_paper_and_exports_items(tmp_path) -> None:
    system = SentenceStore(fail={"p1": 1, "p2": 5})
    record = ingest(tmp_path, system, retries=1)
    assert system.attempts == {"p1": 2, "p2": 2}  # one retry each
    assert record["papers"] == 2 and record["papers_failed"] == 1
    assert record["failed"] == [{"paper_id": "p2", "error": "RuntimeError: library error on p2"}]
    assert record["papers_without_items"] == ["p2"]  # its partial first sentence was removed
    assert record["items_stored"] == 3  # p1's three sentences, once: the retry started clean
    units = read_units(tmp_path / "items.jsonl")
    assert sorted(units) == ["p1-0", "p1-1", "p1-2"]
    assert units["p1-0"].start is None and units["p1-0"].paper_id == "p1"
    assert json.loads((tmp_path / "ingest.json").read_text()) == record


def test_a_crash_after_ingest_leaves_no_store_in_place(tmp_path) -> None:
    system = SentenceStore()
    system.open = lambda store_dir, endpoint: (_ for _ in ()).throw(OSError("disk full"))
    with pytest.raises(OSError, match="disk full"):
        ingest(tmp_path, system)
    assert not (tmp_path / "store").exists()
    assert not (tmp_path / "ingest.json").exists()
    assert list(tmp_path.iterdir()) == []  # no staging directory left behind either


def restored(tmp_path: Path, system: SentenceStore, modality: str, budgets, tolerance=0.25,
             gate="warn"):  # fmt: skip
    ingest(tmp_path, system)
    _, questions = memory_slice(corpus(), 2)
    units = read_units(tmp_path / "items.jsonl")
    handle = system.open(tmp_path / "store", ENDPOINT)

    def bm25(query: str, depth: int):  # the lexical channel: the last sentence of each paper
        return [("p2-3", 2.0), ("p1-2", 1.0)][:depth]

    ranker = StoreRanker(system, handle, units, bm25, depth=10, rrf_k=60)
    outs = [tmp_path / "cells" / f"{b}.jsonl" for b in budgets]
    verdicts = [tmp_path / "cells" / f"{b}.budget.json" for b in budgets]
    result = restore_store_cells(ranker, questions, modality, budgets, "calibrated", outs,
                                 verdicts, tolerance, gate)  # fmt: skip
    return result, outs, verdicts


def test_a_store_listed_live_before_finish_is_exported_without_opening_it_again(tmp_path) -> None:
    calls: list[str] = []

    class ListedLive(SentenceStore):
        def live_items(self, store_dir, endpoint):
            calls.append("live")
            return SentenceHandle(store_dir, False).items()

        def finish(self, store_dir, endpoint):
            calls.append("finish")

        def open(self, store_dir, endpoint):
            raise AssertionError("a store listed live must not be opened by the ingest")

    record = ingest(tmp_path, ListedLive())
    assert calls == ["live", "finish"]  # listed while the ingest's store was still open
    assert record["items_stored"] == 7
    assert sorted(read_units(tmp_path / "items.jsonl")) == sorted(
        [f"p1-{i}" for i in range(3)] + [f"p2-{i}" for i in range(4)]
    )
    assert (tmp_path / "store" / "p1.jsonl").is_file()


def test_a_failed_ingest_is_not_listed_and_still_finished(tmp_path) -> None:
    calls: list[str] = []

    class Crashing(SentenceStore):
        def ingest_paper(self, paper, store_dir, endpoint):
            raise KeyboardInterrupt  # not a paper's failure: the whole ingest stops

        def live_items(self, store_dir, endpoint):
            calls.append("live")
            return []

        def finish(self, store_dir, endpoint):
            calls.append("finish")

    with pytest.raises(KeyboardInterrupt):
        ingest(tmp_path, Crashing())
    assert calls == ["finish"] and not (tmp_path / "store").exists()


def test_cells_requery_the_store_with_the_calibrated_knob(tmp_path) -> None:
    result, outs, verdicts = restored(tmp_path, SentenceStore(), "dense", ["native", "60"])
    native = [r for _, r in iter_jsonl(outs[0])]
    assert [len(r["unit_ids"]) for r in native] == [4, 4, 4]  # native_knob, 7 items stored
    assert native[0]["spans"][0][1:] == [None, None]  # rewritten items carry no characters
    # 7 items: mean chars per item on the native run decides the knob for a 60-char budget
    mean = sum(r["achieved_chars"] for r in native) / sum(len(r["unit_ids"]) for r in native)
    verdict = json.loads(verdicts[1].read_text())
    assert verdict["top_k"] == max(1, int(60 / mean + 0.5))
    assert verdict["knob_mean"] >= verdict["achieved_mean"]
    cell = [r for _, r in iter_jsonl(outs[1])]
    assert all(r["achieved_chars"] <= 75 for r in cell)  # the 1.25 x B cap


def test_a_knob_that_overshoots_is_marked_knob_limited_not_hidden(tmp_path) -> None:
    result, _, verdicts = restored(tmp_path, SentenceStore(per_channel=True), "dense",
                                   ["native", "60"])  # fmt: skip
    verdict = json.loads(verdicts[1].read_text())
    assert verdict["status"] == "knob_limited"
    assert verdict["knob_mean"] > 75  # the knob's own output, before the cap
    assert "x B" in verdict["reason"]
    assert result["60"].failed is False


def test_hybrid_fuses_the_library_ranking_with_bm25(tmp_path) -> None:
    _, outs, _ = restored(tmp_path, SentenceStore(), "hybrid", ["native"])
    q2 = [r for _, r in iter_jsonl(outs[0]) if r["question_id"] == "q2"][0]
    assert "p2-3" in q2["unit_ids"]  # only the BM25 channel ranks it this high


def test_an_empty_budget_stops_the_run_under_gate_fail(tmp_path) -> None:
    class EmptyAtBudget(SentenceStore):
        def open(self, store_dir, endpoint):
            handle = super().open(store_dir, endpoint)
            search = handle.search
            handle.search = lambda q, m, k: search(q, m, k) if k == self.native_knob else []
            return handle

    with pytest.raises(BudgetError, match="empty"):
        restored(tmp_path, EmptyAtBudget(), "dense", ["native", "60"], gate="fail")


def doctor_for(tmp_path: Path, system: SentenceStore, store: Path | None = None, bm25=True):
    papers, questions = memory_slice(corpus(), 2)
    units = read_units(tmp_path / "items.jsonl")
    handle = system.open(store or tmp_path / "store", ENDPOINT)
    lexical = (lambda q, d: [("p1-0", 1.0)]) if bm25 else None
    ranker = StoreRanker(system, handle, units, lexical, depth=10)
    return StoreDoctor(ranker, questions, ["native", "60"], 0.25, 0.0), len(papers)


def run(tmp_path: Path, doctor: StoreDoctor, n_papers: int, ingest_log: dict | None = None):
    log = ingest_log or json.loads((tmp_path / "ingest.json").read_text())
    n_file = sum(1 for _ in iter_jsonl(tmp_path / "items.jsonl"))
    return run_store_doctor("tiny", doctor, log, n_file, n_papers, tmp_path / "doctor.json")


def test_doctor_passes_a_healthy_store(tmp_path) -> None:
    system = SentenceStore()
    ingest(tmp_path, system)
    result = run(tmp_path, *doctor_for(tmp_path, system))
    assert result["ok"] and [c["ok"] for c in result["checks"]] == [True] * 6


def test_doctor_catches_a_store_path_pointing_at_an_empty_directory(tmp_path) -> None:
    system = SentenceStore()
    ingest(tmp_path, system)
    empty = tmp_path / "elsewhere"
    empty.mkdir()  # search finds nothing there and raises nothing
    with pytest.raises(DoctorError) as err:
        run(tmp_path, *doctor_for(tmp_path, system, store=empty))
    assert "check 1 (probe_context)" in str(err.value)
    assert "check 4 (item_count)" in str(err.value)
    assert (tmp_path / "doctor.failed.json").is_file() and not (tmp_path / "doctor.json").exists()


def test_doctor_catches_a_missing_bm25_channel(tmp_path) -> None:
    system = SentenceStore()
    ingest(tmp_path, system)
    with pytest.raises(DoctorError, match=r"check 3 \(channels\).*BM25 channel is missing"):
        run(tmp_path, *doctor_for(tmp_path, system, bm25=False))


def test_doctor_catches_an_item_count_that_disagrees_with_the_ingest_log(tmp_path) -> None:
    system = SentenceStore()
    ingest(tmp_path, system)
    log = json.loads((tmp_path / "ingest.json").read_text())
    log["items_stored"] += 5
    with pytest.raises(DoctorError, match=r"check 4 \(item_count\).*ingest_log 12"):
        run(tmp_path, *doctor_for(tmp_path, system), ingest_log=log)


def test_exact_repeats_in_the_store_are_counted_once_and_named(tmp_path) -> None:
    from srb.store_doctor import StoreDoctor as Doctor

    log = {"items_stored": 7}
    ok = Doctor.item_count(log, 7, 7, 7, n_duplicates=3)  # 10 stored, 3 repeat another's text
    assert ok.ok and "3 exact repeats" in ok.message
    assert ok.seen["store_duplicates"] == 3
    bad = Doctor.item_count(log, 7, 7, 8, n_duplicates=3)  # one more distinct: still caught
    assert bad.ok is False and "store_native 8" in bad.message


def test_doctor_fails_papers_without_items_above_the_allowed_share(tmp_path) -> None:
    system = SentenceStore(fail={"p2": 9})
    ingest(tmp_path, system)
    with pytest.raises(DoctorError, match=r"check 5 \(document_count\).*without items: p2"):
        run(tmp_path, *doctor_for(tmp_path, system))


def test_ingest_cost_table_reads_the_logs(tmp_path) -> None:
    ingest(tmp_path, SentenceStore())
    rows = ingest_cost_table("tiny", [tmp_path / "ingest.json"], tmp_path / "c.csv",
                             tmp_path / "c.md")  # fmt: skip
    assert rows[0]["items"] == 7 and rows[0]["prompt_tokens"] == 30
    assert rows[0]["model_calls_made"] == 1
    assert "| sentences |" in (tmp_path / "c.md").read_text()


def test_pins_that_are_missing_or_different_name_the_system_and_file(tmp_path) -> None:
    req = tmp_path / "x.txt"
    req.write_text("# comment\npytest==0.0.1\nno-such-dist-srb==1.0\n")
    with pytest.raises(ConfigError) as err:
        check_pins("x", req)
    assert "pytest" in str(err.value) and "0.0.1 is pinned" in str(err.value)
    assert "no-such-dist-srb is not installed" in str(err.value) and str(req) in str(err.value)
    with pytest.raises(ConfigError, match="requirements file .* is missing"):
        check_pins("x", tmp_path / "absent.txt")


def test_doctor_gate_warn_writes_the_failed_report_and_goes_on(tmp_path) -> None:
    system = SentenceStore()
    ingest(tmp_path, system)
    doctor, n = doctor_for(tmp_path, system, bm25=False)
    log = json.loads((tmp_path / "ingest.json").read_text())
    n_file = sum(1 for _ in iter_jsonl(tmp_path / "items.jsonl"))
    result = run_store_doctor("tiny", doctor, log, n_file, n, tmp_path / "doctor.json", gate="warn")
    written = json.loads((tmp_path / "doctor.json").read_text())
    assert result == written and written["ok"] is False and written["gate"] == "warn"
    assert [c["name"] for c in written["checks"] if c["ok"] is False] == ["channels"]
    assert not (tmp_path / "doctor.failed.json").exists()


def test_a_long_ingest_logs_its_progress(caplog) -> None:
    import time

    from srb.store import PaperIngest, _progress

    caplog.set_level("INFO", logger="srb.store")
    done: list[PaperIngest] = []
    stats = {"chat_requests": 7, "model_calls": 5, "completion_tokens": 900}
    with _progress("hindsight", 2, done, lambda: stats, time.perf_counter(), every=0.05):
        done.append(PaperIngest("P1", 10, 1, 3, None, 0.1))
        time.sleep(0.3)
    lines = [r.getMessage() for r in caplog.records if "paper(s) done" in r.getMessage()]
    assert lines and lines[-1].startswith("hindsight: 1/2 paper(s) done after")
    assert "7 chat request(s), 5 model call(s), 900 completion token(s)" in lines[-1]


class FactsFirstHandle(StoreHandle):
    """A library that ranks its short facts before its long summaries (as Graphiti's edges
    come before its nodes): the native run's mean item is longer than a small knob's items."""

    def __init__(self, n_facts: int, fact_chars: int, summary_chars: int):
        self.texts = {f"f{i}": "f" * fact_chars for i in range(n_facts)}
        self.texts |= {f"s{i}": "s" * summary_chars for i in range(n_facts)}

    def items(self) -> list[Item]:
        return [Item(i, t, ("p1",)) for i, t in self.texts.items()]

    def search(self, query: str, modality: str, knob: int) -> list[Item]:
        ranked = sorted(self.texts, key=lambda i: (i[0] != "f", int(i[1:])))
        return [Item(i, self.texts[i], ("p1",), score=1.0 / (r + 1))
                for r, i in enumerate(ranked[:knob])]  # fmt: skip


def facts_first(steps: int | None) -> tuple[StoreRanker, list[Question]]:
    system = SentenceStore().configure({} if steps is None else {"knob_refine_steps": steps})
    system.native_knob = 16  # 8 facts of 20 chars + 8 summaries of 180: mean 100
    handle = FactsFirstHandle(8, 20, 180)
    units = {i: Unit(i, "p1", None, None, t) for i, t in handle.texts.items()}
    return StoreRanker(system, handle, units), [Question("q1", "anything", "", (), ("p1",))]


def test_a_knob_under_budget_is_re_aimed_from_its_own_cell_and_recorded() -> None:
    ranker, questions = facts_first(None)
    cell = restore_calibrated(ranker, questions, "dense", 200, 100.0, 0.25)
    # round(200 / 100) = 2 facts = 40 chars (0.2 x B); 2 * 200 / 40 = 10 items: 8 facts and
    # 2 summaries = 160 + 360 = 520 chars, cut at the 250 cap
    assert cell.knob_steps == (2, 10)
    assert cell.cells[0].achieved_chars == 250
    assert cell.verdict.status == "knob_limited"  # the re-aimed knob overshot, and says so
    assert cell.verdict.to_dict()["knob_steps"] == [2, 10]
    assert "re-aimed 2 -> 10" in cell.verdict.reason


def test_the_paper_s_single_calibration_stays_under_budget_and_fails_the_gate() -> None:
    ranker, questions = facts_first(0)
    cell = restore_calibrated(ranker, questions, "dense", 200, 100.0, 0.25)
    assert cell.knob_steps == (2,)
    assert cell.verdict.status == "under_budget" and cell.verdict.failed
    assert "knob_steps" not in cell.verdict.to_dict()


def test_re_aiming_stops_when_the_store_runs_out_of_items() -> None:
    ranker, questions = facts_first(5)
    cell = restore_calibrated(ranker, questions, "dense", 3000, 1000.0, 0.25)
    # 3 facts (60 chars) -> 150 items asked; the store holds 16 (1,600 chars): ran short
    assert cell.knob_steps == (3, 150)
    assert cell.verdict.status == "depth_limited"


def test_a_store_with_nothing_extracted_from_any_paper_fails_its_ingest(tmp_path) -> None:
    """No silent zeros: an ingest model whose answers hold nothing to store (seen with JSON
    forced without whitespace: Theoria and Mem0 stored 0 items) fails the ingest by name, not the
    BM25 index after it ("refusing to build an empty Lucene index")."""
    system = SentenceStore(fail={"p1": 9, "p2": 9})
    with pytest.raises(RuntimeError, match=r"sentences: nothing extracted from any of its 2 paper"):
        ingest(tmp_path, system)
    assert not (tmp_path / "items.jsonl").exists() and not (tmp_path / "ingest.json").exists()
