"""What a CPU job beside the vLLM CPU server costs the server, and what `srb.priority` buys back.

One vLLM server for the memory systems' ingest model (its own session, as the workflow starts
it); the same 10 of Theoria's real extraction prompts (10 in flight) are timed alone and beside
a one-thread MiniLM encoder (what `dense_index` runs) started in each of these ways:
  - `same session, nice 0`: a job of a plain `snakemake` run;
  - `same session, nice 19`: plain `nice`, which autogroups make powerless across sessions;
  - `own session, autogroup nice N`: what `python -m srb run` and the helper services get.
Each condition prefixes its prompts with its name, so the prefix cache cannot carry one
condition's work into another. Prints the CPU, a table, and writes bench/results/cpu_priority.*.

    python bench/cpu_priority.py [--nices 5 10 19]
"""

from __future__ import annotations

import argparse
import copy
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from llm_layer import (  # noqa: E402
    ingest_prompts,
    platform_cpu_model,
    private_server,
    timed_concurrent,
)

from srb.llm.models import vllm_options  # noqa: E402
from srb.priority import autogroup_enabled  # noqa: E402

# argv: autogroup nice or "-", plain nice, rate log. Encodes paper-like texts, one thread.
ENCODER = """
import os, sys, time
os.environ["OMP_NUM_THREADS"] = "1"
if sys.argv[1] != "-":
    open("/proc/self/autogroup", "w").write(sys.argv[1])
os.nice(int(sys.argv[2]))
sys.path.insert(0, sys.argv[4])
from srb.index.dense import Encoder
enc = Encoder("minilm")
texts = [("The randomized trial measured blood pressure outcomes in adults " * 20)[:1200]] * 32
n, t = 0, time.time()
while True:
    enc.encode(texts)
    n += len(texts)
    if time.time() - t > 5:
        with open(sys.argv[3], "a") as fh:
            fh.write(f"{n / (time.time() - t):.2f}\\n")
        n, t = 0, time.time()
"""


def encoder(condition: str, log: Path) -> subprocess.Popen | None:
    """The encoder for `condition`, or None when the server runs alone."""
    if condition == "alone":
        return None
    own = condition.startswith("own session")
    group = condition.rsplit(" ", 1)[1] if own else "-"
    plain = condition.rsplit(" ", 1)[1] if not own else "0"
    cmd = [sys.executable, "-c", ENCODER, group, plain, str(log), str(REPO)]
    return subprocess.Popen(cmd, start_new_session=own)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nices", nargs="+", type=int, default=[5, 10, 19])
    parser.add_argument("--prompts", type=int, default=10)
    parser.add_argument("--out", default=str(REPO / "bench/results/cpu_priority"))
    args = parser.parse_args()
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    model = config["memory"]["llm"]
    spec = config["llm"]["models"][model]
    requests, share = ingest_prompts(config, args.prompts + 2)
    conditions = ["alone", "same session, nice 0", "same session, nice 19"]
    if autogroup_enabled():
        conditions += [f"own session, autogroup nice {n}" for n in args.nices]
    conditions.append("alone")  # again: the server's own drift
    print(f"CPU: {platform_cpu_model()}; autogroups: {autogroup_enabled()}; prompts: {share}")
    rows = []
    logs = Path(args.out).parent / "cpu_priority_logs"
    logs.mkdir(parents=True, exist_ok=True)
    with private_server(model, REPO / "cache/models" / model, vllm_options(model, spec)) as be:
        timed_concurrent(be, requests[:2], 2)  # compiles the schema's grammar, loads the model
        for i, condition in enumerate(conditions):
            log = logs / f"encoder-{i}.txt"
            log.unlink(missing_ok=True)
            bg = encoder(condition, log)
            if bg:
                time.sleep(15)  # the encoder loaded and running
            batch = copy.deepcopy(requests[2:])
            for r in batch:
                r.messages[0]["content"] = f"[{condition}]\n" + r.messages[0]["content"]
            done, wall = timed_concurrent(be, batch, len(batch))
            if bg:
                bg.kill()
                bg.wait()
            rates = [float(x) for x in log.read_text().split()] if log.exists() else []
            rows.append(
                {
                    "condition": condition,
                    "wall_s": round(wall, 1),
                    "completion_tokens": sum(d.completion_tokens for d in done),
                    "encoder_texts_per_s": round(sum(rates) / len(rates), 1) if rates else None,
                }
            )
            print(rows[-1], flush=True)
    alone = min(r["wall_s"] for r in rows if r["condition"] == "alone")
    lines = [
        f"CPU: {platform_cpu_model()}. {args.prompts} extraction prompts in flight at once.",
        "",
        "| encoder beside the server | wall s | vs alone | completion tokens | encoder texts/s |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        rate = "–" if r["encoder_texts_per_s"] is None else r["encoder_texts_per_s"]
        lines.append(
            f"| {r['condition']} | {r['wall_s']} | {r['wall_s'] / alone:.2f}x | "
            f"{r['completion_tokens']} | {rate} |"
        )
    out = Path(args.out)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    header = list(rows[0])
    out.with_suffix(".tsv").write_text(
        "\t".join(header)
        + "\n"
        + "".join("\t".join(str(r[h]) for h in header) + "\n" for r in rows)
    )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
