"""Store-system ingest benchmark, measured side by side in this one run:

1. Extraction throughput: the library's calls issued with papers ingested concurrently
   (`--concurrency`, the workflow's `memory.concurrency`) vs one paper after another (the
   library's sequential default), same model and papers, each on its own empty call cache and
   its own freshly started vLLM server (started before the clock starts, so neither run pays
   the start-up nor inherits the other's prefix cache): prompt + generated tokens per second
   of wall time, and the ratio (goal >= 3x).
2. Warm re-ingest vs cold: the concurrent run repeated on its now-warm cache: wall time, and the
   model calls it made (goal: 0) and whether the exported items are byte-identical.

Real library (Mem0 by default), real caching endpoint, one real vLLM server of the configured
ingest model (config/config.yaml `memory.llm`) shared by all runs; the CPU is printed.

    python bench/store_ingest.py [--system mem0] [--papers 4] [--concurrency 4]

Prints one table; exits 0.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.llm_layer import platform_cpu_model  # noqa: E402
from srb.data.canonical import load_canonical  # noqa: E402
from srb.llm import cpu  # noqa: E402
from srb.store import ingest_store, memory_endpoint, memory_slice  # noqa: E402
from srb.systems import get_store_system  # noqa: E402

CORPUS = REPO / "resources/corpora/evidence-inference-ccby"


def run_once(system_name: str, memory: dict, llm: dict, dense: dict, papers, out: Path,
             concurrency: int) -> dict:  # fmt: skip
    system = get_store_system(system_name).configure(memory)
    settings = system.endpoint_settings()
    with memory_endpoint(llm, memory["llm"], dense, **settings) as (endpoint, server):
        started = time.perf_counter()
        record = ingest_store(
            system, papers, out / "store", out / "items.jsonl", out / "ingest.json", endpoint,
            server.stats.to_dict, retries=0, concurrency=concurrency,
        )  # fmt: skip
        record["bench_wall_s"] = time.perf_counter() - started
    return record


def tokens_per_s(record: dict) -> float:
    calls = record["model_calls"]
    return (calls["prompt_tokens"] + calls["completion_tokens"]) / record["bench_wall_s"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", default="mem0")
    parser.add_argument("--papers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()

    from snakemake.utils import validate

    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    validate(config, str(REPO / "config/schema.yaml"))  # fills the schema's defaults
    memory = dict(config["memory"])
    host = cpu.read_host()
    print(f"CPU: {platform_cpu_model()} ({len(host.cpus)} usable cores); flags: "
          f"{' '.join(sorted(f for f in host.flags if 'avx512' in f or 'amx' in f))}")  # fmt: skip
    papers, _ = memory_slice(load_canonical(CORPUS), args.papers)
    print(f"{args.system} on {len(papers)} papers ({sum(len(p.text) for p in papers)} chars), "
          f"ingest model {memory['llm']}")  # fmt: skip
    root = Path(tempfile.mkdtemp(prefix="srb-bench-ingest-"))
    try:
        rows = []
        from srb.llm.models import vllm_options
        from srb.llm.server import acquire_server, stop_servers

        model = memory["llm"]
        model_dir = str(Path(config["llm"]["models_dir"]) / model)
        for label, conc in (("sequential", 1), ("concurrent", args.concurrency)):
            servers = root / label / "servers"
            llm = {**config["llm"], "cache": str(root / label / "calls.sqlite"),
                   "servers_dir": str(servers)}  # fmt: skip
            dense = {**config["dense"], "cache": str(root / "emb.sqlite")}
            acquire_server(model, model_dir, vllm_options(model, llm["models"][model]), servers)
            record = run_once(args.system, memory, llm, dense, papers, root / label / "cold", conc)
            rows.append((label, conc, record))
            if label == "concurrent":
                warm = run_once(args.system, memory, llm, dense, papers, root / label / "warm",
                                conc)  # fmt: skip
                rows.append(("concurrent, warm", conc, warm))
            stop_servers(servers)
        print("\n| run | papers at once | model calls | prompt tok | gen tok | wall s | tok/s |")
        print("|---|---|---|---|---|---|---|")
        for label, conc, r in rows:
            c = r["model_calls"]
            print(f"| {label} | {conc} | {c['model_calls']} | {c['prompt_tokens']} | "
                  f"{c['completion_tokens']} | {r['bench_wall_s']:.1f} | {tokens_per_s(r):.0f} |")  # fmt: skip
        seq, conc, warm = rows[0][2], rows[1][2], rows[2][2]
        same = (root / "concurrent/cold/items.jsonl").read_bytes() == (
            root / "concurrent/warm/items.jsonl"
        ).read_bytes()
        print(f"\nconcurrent / sequential tokens/s: {tokens_per_s(conc) / tokens_per_s(seq):.2f}x "
              f"(goal >= 3x)")  # fmt: skip
        print(f"warm / cold wall: {warm['bench_wall_s'] / conc['bench_wall_s']:.3f}; warm model "
              f"calls: {warm['model_calls']['model_calls']} (goal 0); items identical: {same}")  # fmt: skip
    finally:
        from srb.llm.server import stop_servers

        for label in ("sequential", "concurrent"):  # the bench's own servers only
            stop_servers(root / label / "servers")
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
