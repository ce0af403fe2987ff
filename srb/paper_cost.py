"""What a grid costs before anyone books a cluster: the jobs and resources of its dry run, and
the LLM tokens and GPU-hours of its model work, derived from a finished (small) run's
measured per-item costs.

Measured (from the small run's files): each store system's ingest tokens per character of paper
text (its ingest log), the synthesizer's characters per prompt token and prompt overhead (a
least-squares fit over every answer's context characters and prompt tokens). Stated (from the
paper, `resources/paper_scale.yaml`) where the corpus is not on disk: papers, tokens and
questions. Assumed (flagged in every table): each model's serving throughput, until measured on
the GPU host (`bench/llm_layer.py` prints prompt and generated tokens/s).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from srb.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
PAPER_SCALE = REPO / "resources/paper_scale.yaml"


# ------------------------------------------------------------------------- the dry run's jobs


@dataclass(frozen=True)
class DryJob:
    rule: str
    threads: int
    mem_mb: int
    runtime_min: int
    gpu: int
    wildcards: Mapping[str, str] = field(default_factory=dict)


def parse_dry_run(text: str) -> list[DryJob]:
    """Every job block of `snakemake --dry-run` output (the target rule `all` excluded),
    those a job group lists indented under "Group job ..." included (profiles/slurm groups
    the model clients)."""
    jobs = []
    for block in re.split(r"\n(?=[ \t]*(?:local)?rule \w+:)", text):
        head = re.match(r"\s*(?:local)?rule (\w+):", block)
        if not head or head.group(1) == "all":
            continue
        threads = re.search(r"^\s+threads: (\d+)", block, re.M)
        resources = re.search(r"^\s+resources: (.*)$", block, re.M)
        res = dict(
            kv.split("=", 1)
            for kv in (resources.group(1).split(", ") if resources else [])
            if "=" in kv
        )
        wc = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        wildcards = dict(kv.split("=", 1) for kv in wc.group(1).split(", ")) if wc else {}
        jobs.append(
            DryJob(
                head.group(1),
                # a model-server client's threads: 0 is a workstation's; a cluster books it one
                # CPU (profiles/slurm set-threads), so the core-hours count it as one
                max(1, int(threads.group(1))) if threads else 1,
                int(res.get("mem_mb", 0)),
                int(res.get("runtime", 0)),
                int(res.get("gpu", 0)),
                wildcards,
            )
        )
    return jobs


def dry_run(configfile: str | Path, workdir: str | Path = REPO) -> str:
    """The dry run's text for `configfile` (the workflow's own DAG, nothing executed)."""
    cmd = [sys.executable, "-m", "snakemake", "--dry-run", "--configfile", str(configfile)]
    done = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    if done.returncode != 0:
        raise ConfigError(f"dry run of {configfile} failed:\n{done.stderr[-3000:]}")
    return done.stdout + done.stderr


def job_rows(jobs: Iterable[DryJob]) -> list[dict[str, Any]]:
    """Per rule: jobs, what one job declares, and the summed core-hours of the runtime limits
    (an upper bound a scheduler books, not a prediction)."""
    by_rule: dict[str, list[DryJob]] = defaultdict(list)
    for j in jobs:
        by_rule[j.rule].append(j)
    rows = []
    for rule, js in sorted(by_rule.items(), key=lambda kv: -len(kv[1])):
        rows.append(
            {
                "rule": rule,
                "jobs": len(js),
                "threads": max(j.threads for j in js),
                "mem_mb": max(j.mem_mb for j in js),
                "runtime_min": max(j.runtime_min for j in js),
                "gpu": max(j.gpu for j in js),
                "core_hours_limit": sum(j.threads * j.runtime_min for j in js) / 60,
            }
        )
    return rows


# ---------------------------------------------------------------------- measured per-item costs


@dataclass(frozen=True)
class IngestCost:
    """One store system's measured ingest cost per character of paper text."""

    system: str
    papers: int
    chars: int
    requests: int
    prompt_tokens: int
    completion_tokens: int
    model_calls: int = 0

    def scaled(self, chars: float, made_only: bool = False) -> tuple[float, float, float]:
        """(requests, prompt tokens, completion tokens) for `chars` characters of papers;
        `made_only`: only the share of requests that reached a model (the rest came from the
        call cache, e.g. Prism's requests after Theoria's ingest sent them)."""
        f = chars / self.chars
        if made_only:
            f *= self.model_calls / self.requests if self.requests else 0.0
        return self.requests * f, self.prompt_tokens * f, self.completion_tokens * f


def ingest_cost(ingest_log: str | Path) -> IngestCost | None:
    """A store system's measured cost; None for a unit system's log (it counts units and
    makes no model calls)."""
    log = json.loads(Path(ingest_log).read_text())
    if "per_paper" not in log:
        return None
    chars = sum(p["chars"] for p in log["per_paper"])
    if not chars:
        raise ValueError(f"{ingest_log}: per_paper holds no characters; nothing to scale from")
    calls = log["model_calls"]
    return IngestCost(
        log["system"],
        log["papers"],
        chars,
        calls["chat_requests"],
        calls["prompt_tokens"],
        calls["completion_tokens"],
        calls.get("model_calls", 0),
    )


@dataclass(frozen=True)
class PromptFit:
    """prompt tokens = overhead + context characters / chars_per_token (least squares)."""

    overhead_tokens: float
    chars_per_token: float
    answers: int

    def tokens(self, context_chars: float) -> float:
        return self.overhead_tokens + context_chars / self.chars_per_token


def fit_prompt_tokens(records: Iterable[Mapping[str, Any]]) -> PromptFit:
    """Fit over answers that record `context_chars_used` and `prompt_tokens`."""
    xs, ys = [], []
    for r in records:
        if r.get("prompt_tokens") and r.get("context_chars_used") is not None:
            xs.append(float(r["context_chars_used"]))
            ys.append(float(r["prompt_tokens"]))
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        raise ValueError(f"need answers with at least two context sizes to fit, got {n}")
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    if slope <= 0:
        raise ValueError("prompt tokens do not grow with context characters; cannot fit")
    return PromptFit(my - slope * mx, 1 / slope, n)


def read_answers(answers_dir: str | Path) -> list[dict[str, Any]]:
    out = []
    for f in sorted(Path(answers_dir).rglob("*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


# --------------------------------------------------------------------------- the grid's workload


def parse_chars(budget: str) -> int | None:
    """'10K' -> 10000, '2M' -> 2000000, 'native' -> None."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KM]?)", budget)
    if not m:
        return None
    return int(float(m.group(1)) * {"": 1, "K": 1000, "M": 1_000_000}[m.group(2)])


@dataclass
class Workload:
    """Requests and tokens one model serves in the grid."""

    requests: float = 0.0
    prompt_tokens: float = 0.0
    completion_tokens: float = 0.0
    parts: Counter = field(default_factory=Counter)

    def add(self, part: str, requests: float, prompt: float, completion: float) -> None:
        self.requests += requests
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.parts[part] += requests


def corpus_scale(config: Mapping[str, Any], corpus: str) -> dict[str, Any]:
    """papers, chars and questions of one corpus: `resources/paper_scale.yaml`'s stated figures
    (tokens converted at its `chars_per_token`)."""
    stated = yaml.safe_load(PAPER_SCALE.read_text())
    name = config["corpus_sources"][corpus].get("published_name", corpus)
    entry = stated["corpora"].get(name) or stated["corpora"].get(corpus)
    if entry is None:
        raise ConfigError(f"{PAPER_SCALE}: no stated size for corpus {corpus!r} ({name})")
    return {
        "papers": entry["papers"],
        "chars": entry["tokens"] * stated["chars_per_token"],
        "questions": entry["questions"],
        "source": entry["source"],
    }


def grid_workload(
    config: Mapping[str, Any],
    jobs: Iterable[DryJob],
    ingest: Mapping[str, IngestCost],
    fit: PromptFit,
    scale: Mapping[str, Mapping[str, Any]],
) -> tuple[dict[str, Workload], list[str]]:
    """Per model: the grid's requests and tokens. Completion tokens are the configured caps
    (upper bounds). Native cells are costed at the largest budget; notes say what was assumed
    and which systems had no measurement (left out, never counted as 0)."""
    llm, memory = config["llm"], config.get("memory") or {}
    budgets = [c for c in (parse_chars(b) for b in config["budgets"]) if c]
    native_chars = max(budgets) if budgets else 0
    window_chars = {
        m: spec.get("max_model_len", 0) * fit.chars_per_token for m, spec in llm["models"].items()
    }
    from srb.systems import store_registry

    registry = store_registry()
    in_grid = set(memory.get("systems") or [])
    out: dict[str, Workload] = defaultdict(Workload)
    notes = [f"native cells costed at the largest budget, {native_chars:,} characters"]
    for j in jobs:
        corpus = j.wildcards.get("corpus")
        if j.rule == "ingest_store":
            system = j.wildcards["system"]
            cost = ingest.get(system)
            if cost is None:
                notes.append(f"{corpus}/{system}: ingest not measured in the small run; left out")
                continue
            reused = [
                s for s in getattr(registry.get(system), "reuses_requests_of", ()) if s in in_grid
            ]
            r, p, c = cost.scaled(scale[corpus]["chars"], made_only=bool(reused))
            if reused:
                notes.append(
                    f"{corpus}/{system}: sends {', '.join(reused)}'s requests, answered from the "
                    f"call cache after that ingest: only the {cost.model_calls} of {cost.requests} "
                    "requests that reached a model in the small run are scaled"
                )
            out[memory["llm"]].add(f"ingest {system}", r, p, c)
        elif j.rule == "synthesize":
            n = scale[corpus]["questions"]
            model, system = j.wildcards["synth"], j.wildcards["system"]
            chars = 0 if system == "base" else parse_chars(j.wildcards["budget"]) or native_chars
            chars = min(chars, window_chars.get(model, chars))
            out[model].add("synthesize", n, n * fit.tokens(chars), n * llm["max_answer_tokens"])
        elif j.rule == "judge" and j.wildcards.get("judge") in llm["models"]:
            n = scale[corpus]["questions"]
            chars = llm.get("judge_context_chars", 0) + 4 * llm["max_answer_tokens"]
            out[j.wildcards["judge"]].add(
                "judge", n, n * fit.tokens(chars), n * llm.get("judge_max_tokens", 128)
            )
    return dict(out), notes


def gpu_hours(work: Workload, throughput: Mapping[str, Any]) -> float:
    """Serving hours x GPUs per replica: prefill and decode at the stated aggregate rates."""
    seconds = (
        work.prompt_tokens / throughput["prefill_tok_s"]
        + work.completion_tokens / throughput["decode_tok_s"]
    )
    return seconds / 3600 * throughput["gpus"]


# ------------------------------------------------------------------------------------- report


def _md(rows: list[dict[str, Any]], cols: list[str]) -> list[str]:
    def fmt(v: Any) -> str:
        return f"{v:,.1f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r[c]) for c in cols) + " |" for r in rows]
    return lines


def report(
    configfile: str | Path,
    measured: str | Path,
    dry_text: str | None = None,
) -> str:
    """The cost report of `configfile`'s grid from the small run under `measured`
    (`results/<corpus>` of a finished default run)."""
    config = yaml.safe_load(Path(configfile).read_text())
    jobs = parse_dry_run(dry_text if dry_text is not None else dry_run(configfile))
    measured = Path(measured)
    costs = map(ingest_cost, sorted(measured.glob("units/*.ingest.json")))
    ingest = {c.system: c for c in costs if c is not None}
    answers = read_answers(measured / "answers")
    fit = fit_prompt_tokens(answers)
    scale = {c: corpus_scale(config, c) for c in config["corpora"]}
    work, notes = grid_workload(config, jobs, ingest, fit, scale)
    stated = yaml.safe_load(PAPER_SCALE.read_text())
    lines = [f"# Cost of {configfile}: {len(jobs)} jobs", "", "## Jobs and declared resources", ""]
    rows = job_rows(jobs)
    lines += _md(
        rows, ["rule", "jobs", "threads", "mem_mb", "runtime_min", "gpu", "core_hours_limit"]
    )
    lines += [
        "",
        f"Sum of runtime limits: {sum(r['core_hours_limit'] for r in rows):,.1f} core-hours.",
        "",
    ]
    lines += ["## Corpus sizes", ""]
    lines += _md(
        [
            {"corpus": c, **{k: v for k, v in s.items()}, "chars": int(s["chars"])}
            for c, s in scale.items()
        ],
        ["corpus", "papers", "chars", "questions", "source"],
    )
    lines += ["", "## Model work and GPU-hours", ""]
    model_rows = []
    for model, w in sorted(work.items()):
        tp = stated["throughput"].get(model)
        model_rows.append(
            {
                "model": model,
                "requests": int(round(w.requests)),
                "prompt_tokens": int(round(w.prompt_tokens)),
                "completion_tokens_cap": int(round(w.completion_tokens)),
                "work": ", ".join(f"{k} {int(round(v)):,}" for k, v in sorted(w.parts.items())),
                "gpus": tp["gpus"] if tp else "n/a",
                "gpu_hours": gpu_hours(w, tp) if tp else "n/a: no throughput stated",
            }
        )
    lines += _md(
        model_rows,
        [
            "model",
            "requests",
            "prompt_tokens",
            "completion_tokens_cap",
            "work",
            "gpus",
            "gpu_hours",
        ],
    )
    hours = [r["gpu_hours"] for r in model_rows if isinstance(r["gpu_hours"], float)]
    lines += [
        "",
        f"Total: {sum(hours):,.1f} GPU-hours over {len(hours)} of {len(model_rows)} model(s)"
        + ("" if len(hours) == len(model_rows) else " (the others state no throughput)"),
    ]
    lines += ["", "How each figure was made:"]
    lines += [
        f"- prompt tokens: {fit.overhead_tokens:,.0f} + context characters / "
        f"{fit.chars_per_token:.2f}, fitted over {fit.answers} answers of {measured}",
        *(
            f"- ingest {c.system}: {c.prompt_tokens:,} prompt + {c.completion_tokens:,} completion "
            f"tokens, {c.requests} requests over {c.chars:,} characters of {c.papers} paper(s) "
            f"(measured), scaled by characters"
            for c in ingest.values()
        ),
        f"- corpus sizes: stated in the paper ({PAPER_SCALE.name}); tokens x "
        f"{stated['chars_per_token']} characters per token",
        f"- throughput: ASSUMED ({stated['throughput_source']})",
        "- completion tokens: the configured caps, an upper bound",
        "- ingest tokens follow the small run's settings and ingest model (e.g. its Theoria "
        "claims per pass); a grid that extracts more per call costs more than scaled here",
        "- not costed: the sequential evaluation's /observe extraction (the same requests as the "
        "bulk ingest, so mostly call-cache hits) and its answers, and the encoder's embeddings",
        *(f"- {n}" for n in notes),
    ]
    return "\n".join(lines) + "\n"
