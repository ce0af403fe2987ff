"""`python -m srb paper-cost`: the dry run's jobs and resources, and the grid's tokens and
GPU-hours scaled from a small run's measured costs. Expected values are worked by hand."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from srb.__main__ import main
from srb.paper_cost import (
    DryJob,
    IngestCost,
    Workload,
    fit_prompt_tokens,
    gpu_hours,
    grid_workload,
    job_rows,
    parse_chars,
    parse_dry_run,
)

REPO = Path(__file__).resolve().parents[1]

DRY = """Building DAG of jobs...
[Wed Dec  2 00:47:21 2026]
rule ingest_store:
    input: results/paim/corpus/papers.jsonl
    output: results/paim/store/mem0
    jobid: 12
    wildcards: corpus=paim, system=mem0
    threads: 2
    resources: tmpdir=/tmp, mem_mb=6000, mem_mib=5723, runtime=600
Shell command: None

[Wed Dec  2 00:47:21 2026]
rule synthesize:
    output: results/paim/answers/m/simple_rag/dense/10K.jsonl
    wildcards: corpus=paim, synth=m, system=simple_rag, modality=dense, budget=10K
    resources: tmpdir=/tmp, runtime=120, mem_mb=4000, mem=4 GB, mem_mib=3815, gpu=1
Shell command: None

[Wed Dec  2 00:47:21 2026]
localrule end_llm_phase:
    output: results/llm_phases/x
    resources: tmpdir=/tmp

[Wed Dec  2 00:47:21 2026]
localrule all:
    input: a, b
    jobid: 0
"""


def test_a_model_server_client_with_threads_0_books_one_core() -> None:
    """threads: 0 frees a workstation's core; a cluster books the job one CPU (set-threads)."""
    block = DRY.replace("    threads: 2\n", "    threads: 0\n")
    (job,) = [j for j in parse_dry_run(block) if j.rule == "ingest_store"]
    assert job.threads == 1
    (row,) = [r for r in job_rows([job]) if r["rule"] == "ingest_store"]
    assert row["core_hours_limit"] == 10.0  # 1 core x 600 min


def test_the_jobs_of_a_job_group_are_read_too() -> None:
    """A cluster profile's job group lists its jobs indented under one header: they count."""
    grouped = """[Fri Dec  4 19:12:14 2026] Group job model_answers (jobs in lexicogr. order):

    [Fri Dec  4 19:12:14 2026]
    rule judge:
        output: results/tiny/judgments/m/rubric/simple_rag/bm25/2K.jsonl
        wildcards: corpus=tiny, synth=m, judge=rubric, system=simple_rag, modality=bm25, budget=2K
        resources: tmpdir=/tmp, mem_mb=4000, runtime=120, model_clients=1
Shell command: None

    [Fri Dec  4 19:12:14 2026]
    rule synthesize:
        output: results/tiny/answers/m/base/none/native.jsonl
        threads: 3
        resources: tmpdir=/tmp, mem_mb=3000, runtime=60, model_clients=1
Shell command: None
"""
    jobs = parse_dry_run(DRY + grouped)
    assert [(j.rule, j.threads, j.mem_mb, j.runtime_min) for j in jobs[-2:]] == [
        ("judge", 1, 4000, 120),
        ("synthesize", 3, 3000, 60),
    ]
    assert jobs[-2].wildcards["judge"] == "rubric" and len(jobs) == 5


def test_the_dry_runs_job_blocks_are_read_with_their_resources_and_wildcards() -> None:
    jobs = parse_dry_run(DRY)
    assert jobs == [
        DryJob("ingest_store", 2, 6000, 600, 0, {"corpus": "paim", "system": "mem0"}),
        DryJob(
            "synthesize",
            1,
            4000,
            120,
            1,
            {
                "corpus": "paim",
                "synth": "m",
                "system": "simple_rag",
                "modality": "dense",
                "budget": "10K",
            },
        ),  # fmt: skip
        DryJob("end_llm_phase", 1, 0, 0, 0, {}),
    ]


def test_rows_per_rule_sum_the_booked_core_hours() -> None:
    jobs = [DryJob("a", 2, 100, 30, 0), DryJob("a", 1, 300, 60, 0), DryJob("b", 1, 10, 6, 1)]
    rows = {r["rule"]: r for r in job_rows(jobs)}
    assert rows["a"]["jobs"] == 2 and rows["a"]["mem_mb"] == 300
    assert rows["a"]["core_hours_limit"] == pytest.approx((2 * 30 + 60) / 60)  # 2.0
    assert rows["b"]["gpu"] == 1 and rows["b"]["core_hours_limit"] == pytest.approx(0.1)


def test_the_prompt_fit_recovers_overhead_and_characters_per_token() -> None:
    # answers made with 50 tokens of template and exactly 4 characters per token
    records = [{"context_chars_used": c, "prompt_tokens": 50 + c // 4} for c in (0, 400, 4000)]
    fit = fit_prompt_tokens(records + [{"context_chars_used": 8, "prompt_tokens": None}])
    assert fit.overhead_tokens == pytest.approx(50)
    assert fit.chars_per_token == pytest.approx(4.0)
    assert fit.answers == 3
    assert fit.tokens(10_000) == pytest.approx(2_550)
    with pytest.raises(ValueError, match="two context sizes"):
        fit_prompt_tokens([{"context_chars_used": 5, "prompt_tokens": 9}] * 3)


def test_budgets_parse_to_characters() -> None:
    assert parse_chars("10K") == 10_000
    assert parse_chars("2M") == 2_000_000
    assert parse_chars("native") is None


def test_ingest_scales_by_characters_and_reused_requests_count_only_what_reached_a_model() -> None:
    cost = IngestCost("x", papers=2, chars=10_000, requests=20, prompt_tokens=30_000,
                      completion_tokens=5_000, model_calls=5)  # fmt: skip
    assert cost.scaled(1_000_000) == pytest.approx((2_000, 3_000_000, 500_000))
    # 5 of 20 requests reached a model: a quarter of it
    assert cost.scaled(1_000_000, made_only=True) == pytest.approx((500, 750_000, 125_000))


def test_the_grid_workload_per_model_worked_by_hand() -> None:
    config = {
        "budgets": ["native", "10K"],
        "memory": {"llm": "ingest-m", "systems": ["mem0", "theoria", "prism"]},
        "llm": {
            "max_answer_tokens": 100,
            "judge_context_chars": 2000,
            "judge_max_tokens": 10,
            "models": {"synth-m": {"max_model_len": 4000}, "judge-m": {}},
        },
    }
    fit = fit_prompt_tokens([{"context_chars_used": c, "prompt_tokens": 50 + c // 4}
                             for c in (0, 4000)])  # fmt: skip
    scale = {"c": {"chars": 100_000, "questions": 10}}
    ingest = {
        "mem0": IngestCost("mem0", 1, 10_000, 4, 8_000, 400, 4),
        "theoria": IngestCost("theoria", 1, 10_000, 10, 5_000, 2_000, 10),
        "prism": IngestCost("prism", 1, 10_000, 10, 5_000, 2_000, 0),
    }
    wc = {"corpus": "c", "synth": "synth-m", "modality": "dense"}
    jobs = [
        DryJob("ingest_store", 1, 0, 0, 0, {"corpus": "c", "system": "mem0"}),
        DryJob("ingest_store", 1, 0, 0, 0, {"corpus": "c", "system": "prism"}),
        DryJob("ingest_store", 1, 0, 0, 0, {"corpus": "c", "system": "cognee"}),
        DryJob("synthesize", 1, 0, 0, 0, {**wc, "system": "simple_rag", "budget": "10K"}),
        DryJob("synthesize", 1, 0, 0, 0, {**wc, "system": "simple_rag", "budget": "native"}),
        DryJob("synthesize", 1, 0, 0, 0, {**wc, "system": "base", "budget": "native"}),
        DryJob("judge", 1, 0, 0, 0, {"corpus": "c", "judge": "judge-m"}),
        DryJob("judge", 1, 0, 0, 0, {"corpus": "c", "judge": "rubric"}),
    ]
    work, notes = grid_workload(config, jobs, ingest, fit, scale)
    # ingest: mem0 x10 (100K / 10K chars); prism made 0 calls -> 0; cognee unmeasured, left out
    assert work["ingest-m"].requests == pytest.approx(40)
    assert work["ingest-m"].prompt_tokens == pytest.approx(80_000)
    assert work["ingest-m"].completion_tokens == pytest.approx(4_000)
    assert any("cognee" in n and "left out" in n for n in notes)
    assert any("prism" in n and "0 of 10" in n for n in notes)
    # synthesis, 10 questions each: 10K -> 50 + 2500; native at the largest budget (10K) but the
    # model's window is 4000 tokens = 16,000 chars, so still 10K -> 2550; base -> 50
    s = work["synth-m"]
    assert s.requests == pytest.approx(30)
    assert s.prompt_tokens == pytest.approx(10 * (2550 + 2550 + 50))
    assert s.completion_tokens == pytest.approx(30 * 100)
    # judge: 2000 context chars + 4 x 100 answer chars = 2400 -> 50 + 600 tokens; rubric no model
    j = work["judge-m"]
    assert (j.requests, j.prompt_tokens, j.completion_tokens) == pytest.approx((10, 6500, 100))
    assert "rubric" not in work


def test_gpu_hours_from_stated_throughput() -> None:
    w = Workload(prompt_tokens=7_200_000, completion_tokens=360_000)
    # 7.2M / 8000 = 900 s prefill, 360K / 1000 = 360 s decode: 1260 s = 0.35 h, x 4 GPUs
    assert gpu_hours(w, {"gpus": 4, "prefill_tok_s": 8000, "decode_tok_s": 1000}) == (
        pytest.approx(1.4)
    )


def _measured_run(root: Path) -> Path:
    """A small run's files: an ingest log per store system and answers of two context sizes."""
    units = root / "units"
    units.mkdir(parents=True)
    for system, calls in (("mem0", 4), ("theoria", 10), ("prism", 0)):
        (units / f"{system}.ingest.json").write_text(
            json.dumps(
                {
                    "system": system,
                    "papers": 1,
                    "per_paper": [{"chars": 20_000}],
                    "model_calls": {
                        "chat_requests": 10,
                        "prompt_tokens": 9_000,
                        "completion_tokens": 900,
                        "model_calls": calls,
                    },
                }  # fmt: skip
            )
        )
    (units / "simple_rag.ingest.json").write_text(json.dumps({"system": "simple_rag", "units": 9}))
    answers = root / "answers/m/simple_rag/dense"
    answers.mkdir(parents=True)
    (answers / "1K.jsonl").write_text(
        "".join(
            json.dumps({"context_chars_used": c, "prompt_tokens": 80 + c // 4}) + "\n"
            for c in (1000, 5000)
        )
    )
    return root


@pytest.mark.integration
def test_the_command_costs_the_paper_grid_from_its_real_dry_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    measured = _measured_run(tmp_path / "measured")
    out = tmp_path / "cost.md"
    assert main(["paper-cost", "--configfile", "config/paper.yaml", "--measured", str(measured),
                 "--out", str(out)]) == 0  # fmt: skip
    text = out.read_text()
    assert capsys.readouterr().out == text
    # the job count is Snakemake's own "total" of its job stats, less the target rule
    dry = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--configfile", "config/paper.yaml"],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    total = int(re.search(r"^total\s+(\d+)", dry.stdout + dry.stderr, re.M).group(1))
    assert f"{total - 1} jobs" in text.splitlines()[0]
    config = yaml.safe_load((REPO / "config/paper.yaml").read_text())
    llm = config["llm"]
    for model in {llm["synthesizer"], config["memory"]["llm"], *llm["judges"]} - {"rubric"}:
        row = next(line for line in text.splitlines() if line.startswith(f"| {model} |"))
        assert "n/a" not in row, row
    assert "ASSUMED" in text
    assert "fitted over 2 answers" in text
