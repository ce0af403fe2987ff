"""Integration: the real workflow (Snakemake, Pyserini on the JVM, FAISS, the packaged encoder)
on a tiny corpus this test writes, plus bad-input runs that must fail by name and leave nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]

pytestmark = pytest.mark.integration

TOPICS = {
    "salt": "Dietary salt reduction lowered systolic blood pressure by 5 mmHg in hypertensive adults.",
    "statin": "Statin therapy reduced LDL cholesterol and cardiovascular events over five years.",
    "sleep": "Cognitive behavioural therapy for insomnia improved sleep efficiency in older adults.",
    "malaria": "Bed nets treated with insecticide cut malaria incidence among children under five.",
}


def _paper_text(topic: str, sentence: str) -> str:
    filler = " ".join(
        f"Background sentence {i} about trial design and {topic} cohorts." for i in range(40)
    )
    return (
        f"TITLE:\nA randomised trial on {topic}\n\nABSTRACT.BACKGROUND:\n{filler}\n\n"
        f"BODY.RESULTS:\n{filler} {sentence} {filler}\n"
    )


def write_tiny_corpus(root: Path) -> Path:
    corpus = root / "tiny"
    corpus.mkdir(parents=True)
    papers, questions = [], []
    for topic, sentence in TOPICS.items():
        text = _paper_text(topic, sentence)
        papers.append(
            {"id": f"P-{topic}", "title": topic, "text": text, "source": "test", "licence": "CC0"}
        )
        start = text.index(sentence)
        questions.append(
            {
                "id": f"Q-{topic}",
                "question": f"What did the trial find? {sentence.split(' by ')[0].split(' over ')[0]}",
                "gold_answer": sentence,
                "must_have": [sentence],
                "paper_ids": [f"P-{topic}"],
                "tier": "L1",
                "types": ["factual"],
                "evidence": [
                    {"paper_id": f"P-{topic}", "start": start, "end": start + len(sentence)}
                ],
                "gold_label": None,
            }
        )
    (corpus / "papers.jsonl").write_text("".join(json.dumps(p) + "\n" for p in papers))
    (corpus / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    return corpus


def write_config(root: Path, corpus: Path, **overrides) -> Path:
    config = {
        "corpora": ["tiny"],
        "corpus_sources": {"tiny": {"loader": "canonical", "path": str(corpus)}},
        "systems": ["simple_rag", "paper_rag"],
        "modalities": ["dense", "bm25", "hybrid"],
        "budgets": ["native", "2K", "5K"],
        "budget_mode": "calibrated",
        "retrieval": {"depth": 20, "rrf_k": 60},
        "dense": {"threads": 1},
        "bm25": {"threads": 1},
    }
    config.update(overrides)
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def snakemake(
    workdir: Path, config: Path, *args: str, timeout: int = 900
) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    return subprocess.run(
        [*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
         "--configfile", str(config), "--cores", "2", *args],
        capture_output=True, text=True, env=env, timeout=timeout,
    )  # fmt: skip


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("wf")
    corpus = write_tiny_corpus(root)
    config = write_config(root, corpus)
    proc = snakemake(root, config)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root, corpus, config


def test_grid_outputs_and_traceable_context(tiny_run):
    root, corpus, _ = tiny_run
    papers = {p["id"]: p["text"] for p in read_jsonl(corpus / "papers.jsonl")}
    for system in ("simple_rag", "paper_rag"):
        for modality in ("dense", "bm25", "hybrid"):
            for budget in ("native", "2K", "5K"):
                cell = root / f"results/tiny/retrieval/{system}/{modality}/{budget}.jsonl"
                records = read_jsonl(cell)
                assert [r["question_id"] for r in records] == [f"Q-{t}" for t in TOPICS]
                for r in records:
                    assert all(a > b for a, b in zip(r["scores"], r["scores"][1:], strict=False))
                    pieces = [papers[p][s:e] for p, s, e in r["spans"]]
                    assert r["context"] == "\n\n".join(pieces)
                    assert r["achieved_chars"] == sum(len(x) for x in pieces) > 0
                    assert r["requested_chars"] == {"native": None, "2K": 2000, "5K": 5000}[budget]


def test_bm25_finds_the_evidence_and_diagnostics_table(tiny_run):
    root, _, _ = tiny_run
    native = read_jsonl(root / "results/tiny/retrieval/paper_rag/bm25/native.jsonl")
    assert [r["spans"][0][0] for r in native] == [f"P-{t}" for t in TOPICS]
    rows = (root / "results/tiny/diagnostics/retrieval.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert len(rows) == 1 + 2 * 3 * 3
    table = [dict(zip(header, row.split(","), strict=True)) for row in rows[1:]]
    paper_bm25 = next(
        r
        for r in table
        if r["system"] == "paper_rag" and r["modality"] == "bm25" and r["budget"] == "native"
    )
    assert float(paper_bm25["evidence_recall"]) == 1.0
    assert float(paper_bm25["source_paper_recall"]) == 1.0
    ingest = json.loads((root / "results/tiny/units/simple_rag.ingest.json").read_text())
    assert ingest["n_papers"] == 4 and ingest["n_units"] > 4


def test_hybrid_is_rrf_of_the_two_channels(tiny_run):
    from srb.retrieve import rrf

    root, _, _ = tiny_run
    rank = root / "results/tiny/rankings/simple_rag"
    bm25, dense, hybrid = (read_jsonl(rank / f"{m}.jsonl") for m in ("bm25", "dense", "hybrid"))
    for b, d, h in zip(bm25, dense, hybrid, strict=True):
        expected = rrf(
            [[tuple(x) for x in b["hits"]], [tuple(x) for x in d["hits"]]], k=60, depth=20
        )
        assert [x[0] for x in h["hits"]] == [x[0] for x in expected]
        assert {x[0] for x in b["hits"][:3]} & {x[0] for x in h["hits"][:6]}
        assert {x[0] for x in d["hits"][:3]} & {x[0] for x in h["hits"][:6]}


def test_rerun_has_nothing_to_do(tiny_run):
    root, _, config = tiny_run
    proc = snakemake(root, config, "-n")
    assert proc.returncode == 0
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_pack_mode_hits_budget_exactly(tmp_path):
    corpus = write_tiny_corpus(tmp_path)
    config = write_config(tmp_path, corpus, systems=["simple_rag"], modalities=["bm25"],
                          budgets=["3K"], budget_mode="pack")  # fmt: skip
    proc = snakemake(tmp_path, config)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in read_jsonl(tmp_path / "results/tiny/retrieval/simple_rag/bm25/3K.jsonl"):
        assert r["achieved_chars"] == 3000 and r["requested_chars"] == 3000


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda p, q: (p + [p[0]], q), ["papers.jsonl", "P-salt", "'id'", "duplicate paper id"]),
        (
            lambda p, q: ([{**p[0], "text": "  "}, *p[1:]], q),
            ["papers.jsonl", "P-salt", "'text'", "empty paper"],
        ),
        (
            lambda p, q: (
                p,
                [{**q[0], "evidence": [{"paper_id": "P-salt", "start": 5, "end": 10**6}]}, *q[1:]],
            ),
            ["questions.jsonl", "Q-salt", "evidence[0].end", "outside paper"],
        ),
        (
            lambda p, q: (p, [{**q[0], "paper_ids": ["P-nope"]}, *q[1:]]),
            ["questions.jsonl", "Q-salt", "'paper_ids'", "unknown paper"],
        ),
        (lambda p, q: (p, q + [q[0]]), ["questions.jsonl", "Q-salt", "duplicate question id"]),
    ],
    ids=["duplicate-paper", "empty-paper", "offset-outside", "unknown-paper", "duplicate-question"],
)
def test_bad_corpus_fails_by_name_and_leaves_no_output(tmp_path, mutate, expected):
    corpus = write_tiny_corpus(tmp_path)
    papers, questions = mutate(
        read_jsonl(corpus / "papers.jsonl"), read_jsonl(corpus / "questions.jsonl")
    )
    (corpus / "papers.jsonl").write_text("".join(json.dumps(p) + "\n" for p in papers))
    (corpus / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    config = write_config(tmp_path, corpus)
    proc = snakemake(tmp_path, config, "results/tiny/corpus/papers.jsonl")
    assert proc.returncode != 0
    message = proc.stdout + proc.stderr
    for fragment in expected:
        assert fragment in message, message[-3000:]
    assert (
        not list((tmp_path / "results/tiny/corpus").glob("*.jsonl"))
        if (tmp_path / "results/tiny/corpus").exists()
        else True
    )


def test_malformed_json_line_is_named(tmp_path):
    corpus = write_tiny_corpus(tmp_path)
    with open(corpus / "questions.jsonl", "a") as fh:
        fh.write("{not json\n")
    proc = snakemake(tmp_path, write_config(tmp_path, corpus), "results/tiny/corpus/papers.jsonl")
    assert proc.returncode != 0
    assert "questions.jsonl, record line 5: invalid JSON" in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"systems": ["simple_rag", "mem9"]}, "unknown system 'mem9'"),
        ({"budgets": ["native", "-10K"]}, "budgets"),
        ({"budgets": [-5]}, "budgets"),
        ({"modalities": ["dense", "sparse"]}, "sparse"),
        ({"corpora": ["tiny", "other"]}, "'other' has no entry under corpus_sources"),
    ],
    ids=[
        "unknown-system",
        "negative-budget-label",
        "negative-budget-int",
        "unknown-modality",
        "unknown-corpus",
    ],
)
def test_bad_config_stops_before_any_job(tmp_path, override, expected):
    corpus = write_tiny_corpus(tmp_path)
    proc = snakemake(tmp_path, write_config(tmp_path, corpus, **override), "-n")
    assert proc.returncode != 0
    assert expected in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()


def test_missing_corpus_source_fails_at_run_time_by_name(tmp_path):
    missing = tmp_path / "not-there"
    proc = snakemake(tmp_path, write_config(tmp_path, missing), "results/tiny/corpus/papers.jsonl")
    assert proc.returncode != 0
    assert str(missing) in proc.stdout + proc.stderr


def test_paper_grid_dry_run_without_corpora():
    proc = subprocess.run(
        [*SNAKEMAKE, "-n", "--configfile", "config/paper.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "results/paim/retrieval/simple_rag/hybrid/50K.jsonl" in out
    assert "results/ptr/retrieval/paper_rag/dense/native.jsonl" in out
    counts = dict(
        line.split()[:2]
        for line in out.splitlines()
        if line.split()[:1] in (["restore_context"], ["prepare_corpus"])
    )
    # one restore job per corpus x system x modality writes all 4 budgets' cells
    assert counts == {"prepare_corpus": "2", "restore_context": str(2 * 3 * 2)}


def test_default_runs_the_ingest_model_before_any_synthesis_or_llm_judge():
    """llm.one_server_at_a_time: every ingest and the sequential evaluation's observing job
    (the ingest model's jobs) precede end_llm_phase; every synthesis and LLM-judge job and the
    sequential evaluation's answering job follow it, so the two servers are never up at once."""
    proc = subprocess.run(
        [*SNAKEMAKE, "--dag", "--forceall"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rule_of = {
        m.group(1): m.group(2)
        for m in re.finditer(r'^\s*(\d+)\[label = "([a-z_]+)', proc.stdout, re.M)
    }
    edges = [m.groups() for m in re.finditer(r"^\s*(\d+) -> (\d+)", proc.stdout, re.M)]
    parents: dict[str, set[str]] = {}
    for a, b in edges:
        parents.setdefault(b, set()).add(rule_of[a])
    (phase,) = [n for n, r in rule_of.items() if r == "end_llm_phase"]
    before = [
        r
        for n, r in rule_of.items()
        if r in ("ingest_store", "sequential_theoria_observe", "start_ingest_server")
    ]
    # 6 store systems + the observing job + the server's start on a cold call cache
    assert sorted(parents[phase]) == sorted(set(before)) and len(before) == 8
    (answering,) = [n for n, r in rule_of.items() if r == "sequential_theoria"]
    assert parents[answering] >= {"end_llm_phase", "sequential_theoria_observe"}
    synth = [n for n, r in rule_of.items() if r == "synthesize"]
    assert synth and all("end_llm_phase" in parents[n] for n in synth)
    judges = [n for n, r in rule_of.items() if r == "judge" and "end_llm_phase" in parents[n]]
    assert 0 < len(judges) < len(synth)  # the SmolLM2 judge's cells; rubric needs no server


def test_the_default_llm_judge_scores_native_cells_and_the_rubric_judge_every_cell():
    """llm.judge_scope: native and llm.judge_systems in the default: the 135M judge scores the
    native cells of Simple RAG and base/direct_read, the rubric judge every synthesized cell."""
    from srb.paper_cost import parse_dry_run

    proc = subprocess.run(
        [*SNAKEMAKE, "-n", "--forceall"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = parse_dry_run(proc.stdout + proc.stderr)

    def cell(j):
        return (j.wildcards["system"], j.wildcards["modality"], j.wildcards["budget"])

    synth = {cell(j) for j in jobs if j.rule == "synthesize"}
    judged = {}
    for j in jobs:
        if j.rule == "judge":
            judged.setdefault(j.wildcards["judge"], set()).add(cell(j))
    assert judged["rubric"] == synth
    native = {c for c in synth if c[2] == "native" or c[0] in ("base", "direct_read")}
    # llm.judge_systems: of those, Simple RAG's and the LLM-only cells
    llm_judged = {c for c in native if c[0] in ("simple_rag", "base", "direct_read")}
    assert judged["smollm2-135m"] == llm_judged
    assert ("direct_read", "none", "6K") in llm_judged and ("mem0", "dense", "native") in native
    assert len(llm_judged) == 4 and len(native) < len(synth)
    # llm.modalities [dense, hybrid]: Simple RAG's BM25 cells are restored, not synthesized
    restored = {
        (j.wildcards["system"], j.wildcards["modality"])
        for j in jobs
        if j.rule == "restore_context"
    }
    assert ("simple_rag", "bm25") in restored  # every budget's cell in one job
    assert {c[1] for c in synth if c[0] == "simple_rag"} == {"dense", "hybrid"}
    assert {c[1] for c in synth if c[0] == "mem0"} == {"dense", "hybrid"}  # a store's own


def test_the_ingest_of_one_long_chain_of_calls_starts_first():
    """ingest_priority: Graphiti ingests papers one after another (one chain of dependent
    calls), so it starts before Theoria, which other jobs wait on, which starts before Mem0."""
    proc = subprocess.run(
        [*SNAKEMAKE, "-n", "--forceall"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    priority = {
        m.group(1): int(m.group(2))
        for m in re.finditer(
            r"rule ingest_store:.*?system=(\w+).*?priority: (\d+)", proc.stdout, re.S
        )
    }
    assert priority["graphiti"] > priority["theoria"] > priority["mem0"]
    assert priority["prism"] == priority["mem0"]


def test_every_model_is_prepared_before_the_ingests_can_start() -> None:
    """model_priority: the ingest model first, then the synthesizer, both above the dense
    indexes the ingests wait on, so no model is prepared beside the ingest model's server
    (starved there, it held a core slot for 14 min) and the ingest model's server is started
    ahead (start_ingest_server) as soon as its model is ready."""
    proc = subprocess.run(
        [*SNAKEMAKE, "-n", "--forceall"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = []  # (rule, wildcards, priority, threads) of each job block
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", proc.stdout):
        head = re.match(r"(?:local)?rule (\w+):", block)
        wc = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        prio = re.search(r"^\s+priority: (\d+)$", block, re.M)
        threads = re.search(r"^\s+threads: (\d+)$", block, re.M)  # absent when 1
        if head and wc:
            jobs.append(
                (
                    head.group(1),
                    wc.group(1),
                    int(prio.group(1)) if prio else 0,
                    int(threads.group(1)) if threads else 1,
                )
            )
    prepare = {wc: prio for rule, wc, prio, _ in jobs if rule == "prepare_model"}
    dense = [prio for rule, _, prio, _ in jobs if rule == "dense_index"]
    assert dense and len(prepare) == 2
    assert prepare["model=qwen2.5-coder-0.5b"] > prepare["model=smollm2-135m"] > max(dense)
    start = [
        (wc, prio, threads) for rule, wc, prio, threads in jobs if rule == "start_ingest_server"
    ]
    assert start == [("model=qwen2.5-coder-0.5b", start[0][1], 0)]
    assert start[0][1] > prepare["model=qwen2.5-coder-0.5b"]


def test_the_unit_systems_retrieval_chains_wait_for_the_ingest_phase() -> None:
    """after_ingest_phase: a unit system's BM25 index and doctor wait for the ingest model's
    phase (beside its server they starve holding core slots, and Snakemake then starts no job,
    not even one holding none); a store system's BM25 index does not wait."""
    proc = subprocess.run(
        [*SNAKEMAKE, "-n", "--forceall"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    marker = "results/llm_phases/qwen2.5-coder-0.5b.done.json"
    waits = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", proc.stdout):
        head = re.match(r"(?:local)?rule (bm25_index|doctor):", block)
        system = re.search(r"system=(\w+)", block)
        if head and system:
            inputs = re.search(r"^\s+input: (.*)$", block, re.M)
            waits[(head.group(1), system.group(1))] = marker in inputs.group(1).split(", ")
    for system in ("simple_rag", "section_rag", "paper_rag"):
        assert waits[("bm25_index", system)] and waits[("doctor", system)], system
    assert waits[("bm25_index", "mem0")] is False and waits[("bm25_index", "theoria")] is False


CLIENT_RULES = (
    "ingest_store",
    "restore_store_native",
    "sequential_theoria_observe",
    "sequential_theoria",
    "synthesize",
)
# a store's doctor and restores search it and send no prompt to a model server
STORE_SEARCH_RULES = ("doctor_store", "restore_store")


def _threads_and_clients(
    args: list[str], resource: str = "model_clients"
) -> dict[tuple[str, str], set[tuple[int, int]]]:
    """(rule, judge or '') -> the (threads, `resource`) its jobs declare in a dry run."""
    proc = subprocess.run(
        [*SNAKEMAKE, "-n", "--forceall", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    found: dict[tuple[str, str], set[tuple[int, int]]] = {}
    for block, rule in re.findall(r"((?:local)?rule (\w+):\n(?:    .*\n)+)", proc.stdout):
        threads = re.search(r"^    threads: (\d+)", block, re.M)
        clients = re.search(rf"\b{resource}=(\d+)", block)
        judge = re.search(r"judge=([\w.-]+)", block)
        key = (rule, judge.group(1) if judge else "")
        found.setdefault(key, set()).add(
            (int(threads.group(1)) if threads else 1, int(clients.group(1)) if clients else 0)
        )
    return found


def test_model_server_clients_hold_no_core_and_one_model_clients_slot():
    """threads: 0 on every job that waits on a model server, so retrieval jobs run beside the
    ingests; the rubric judge computes and holds a core; retrieval jobs are not clients."""
    found = _threads_and_clients([])
    for rule in CLIENT_RULES:
        assert found[(rule, "")] == {(0, 1)}, rule
    assert found[("judge", "smollm2-135m")] == {(0, 1)}
    assert found[("judge", "rubric")] == {(1, 0)}
    assert all(c == 0 for rule in ("rank", "dense_index") for _, c in found[(rule, "")])
    # the end of the ingest model's phase gates every answer: it must not wait for a core
    assert found[("end_llm_phase", "")] == {(0, 0)}
    for rule in STORE_SEARCH_RULES:
        assert found[(rule, "")] == {(0, 0)}, rule


def test_store_searches_hold_a_store_searches_slot_and_leave_the_model_clients_slots():
    """On 2 cores a store's doctor and restores held 5 of the 6 model-client slots, so the
    synthesizer's server saw one synthesis job at a time; they have a limit of their own."""
    found = _threads_and_clients([], resource="store_searches")
    for rule in (*STORE_SEARCH_RULES, "restore_store_native"):
        assert found[(rule, "")] == {(0, 1)}, rule
    assert found[("synthesize", "")] == {(0, 0)}
    assert "store_searches" in (REPO / "profiles/default/config.yaml").read_text()


def test_the_slurm_profile_gives_each_model_server_client_one_cpu():
    found = _threads_and_clients(["--profile", str(REPO / "profiles/slurm")])
    for rule in CLIENT_RULES:
        assert found[(rule, "")] == {(1, 1)}, rule
    for rule in STORE_SEARCH_RULES:
        assert found[(rule, "")] == {(1, 0)}, rule
    assert found[("judge", "smollm2-135m")] == {(1, 1)}


def test_only_a_system_with_its_own_environment_waits_for_rule_system_env():
    """Hindsight's jobs read the record of the venv rule system_env builds; Mem0's do not."""
    proc = subprocess.run(
        [*SNAKEMAKE, "-n", "--forceall"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    blocks = re.findall(r"(rule (\w+):\n(?:    .*\n)+)", proc.stdout)
    env_jobs = sorted(b for b, rule in blocks if rule == "system_env")
    assert len(env_jobs) == 2
    assert "output: cache/envs/cognee.json" in env_jobs[0]
    assert "output: cache/envs/hindsight.json" in env_jobs[1]
    for block, rule in blocks:
        if rule in ("ingest_store", "doctor_store", "restore_store", "restore_store_native"):
            for system in ("hindsight", "cognee"):
                wants_env = f"cache/envs/{system}.json" in block
                assert wants_env == (f"system={system}" in block), block


def test_cognees_graph_completion_is_native_and_answered_with_its_own_prompt():
    """A system with both kinds of cells: chunks get every budget and the shared prompt,
    graph_completion only a native cell (restore_store_native) answered with Cognee's prompt."""
    proc = subprocess.run(
        [*SNAKEMAKE, "-n", "--forceall", "-p"], cwd=REPO, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    blocks = re.findall(r"(rule (\w+):\n(?:    .*\n)+)", proc.stdout)
    restores = {rule: b for b, rule in blocks if "system=cognee" in b and "restore_store" in rule}
    assert "modality=chunks" in restores["restore_store"]
    assert "retrieval/cognee/chunks/2K.jsonl" in restores["restore_store"]
    assert "modality=graph_completion" in restores["restore_store_native"]
    answers = [b for b, rule in blocks if rule == "synthesize" and "system=cognee" in b]
    assert sorted(re.search(r"budget=(\w+)", b).group(1) for b in answers
                  if "modality=graph_completion" in b) == ["native"]  # fmt: skip
    assert all("config/prompts/cognee.md" in b for b in answers if "graph_completion" in b)
    assert not any("config/prompts/cognee.md" in b for b in answers if "modality=chunks" in b)


def test_every_store_systems_own_settings_reach_its_jobs():
    """A store job is configured from `params.memory` (rules/common.smk `memory_params`), not the
    whole config: each system's own settings object of the schema must be in it, or a user's
    setting is silently ignored (memory.cognee was, until stop 31) and changing it reruns nothing."""
    from srb.systems import store_registry

    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    memory = schema["properties"]["memory"]["properties"]
    own = sorted(
        k for k, v in memory.items() if k in store_registry() and v.get("type") == "object"
    )
    assert {"mem0", "cognee", "hindsight", "theoria"} <= set(own)
    common = (REPO / "rules" / "common.smk").read_text()
    body = common.split("def memory_params(")[1].split("\ndef ")[0]
    keep = re.search(r"keep = \[(.*?)\]", body, re.S).group(1)
    assert [k for k in own if f'"{k}"' not in keep] == []
