"""Dense encoder throughput on each device this host has, on the default grid's own texts.

The texts are what the workflow encodes for the default corpus: the 1,000-character chunks of
`simple_rag` (the most units of any default system), then the corpus questions. Each setting
(device x dtype x batch size) loads the encoder through srb's own `Encoder`, encodes a warm-up
batch untimed, then encodes every text `--repeats` times; the median is reported as texts/s and
tokens/s (tokens after the encoder's truncation). Every setting's vectors are compared with a
reference (the first setting, or `--reference` vectors saved by another machine's run with
`--save-vectors`), so a faster setting that changes the embeddings is visible: the table gives the
smallest cosine between a text's two vectors and whether the top-10 neighbours of each question
among the chunks stay the same. Batch size 1 is srb's CPU default: each text encoded alone,
`--threads` of them side by side on one intra-op thread each, so a vector does not depend on its
batch (srb.index.dense); larger batch sizes run batched, as on a GPU.

    python bench/encoder_devices.py [--devices cpu cuda] [--dtypes float32 float16]
        [--batch-sizes 32 256] [--encoder minilm|DIR] [--save-vectors F.npy] [--reference F.npy]
        [--json OUT.json]

Prints the CPU model and its vector flags, the GPU, torch's version, then one table; exits 0.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from srb.data.canonical import load_canonical  # noqa: E402
from srb.index.dense import Encoder  # noqa: E402
from srb.units import make_units  # noqa: E402

VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")


def cpu_description() -> str:
    model, flags = platform.processor() or "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    present = [f for f in VECTOR_FLAGS if f in flags]
    return f"{model}; {cores} cores usable; flags: {' '.join(present) or 'none of ' + ','.join(VECTOR_FLAGS)}"


def default_texts(corpus_dir: Path) -> tuple[list[str], int]:
    """The default corpus's simple_rag chunks, then its questions; returns (texts, n_chunks)."""
    corpus = load_canonical(corpus_dir)
    chunks = [u.text for u in make_units(corpus.papers, "chunks", 1000, 200)]
    return chunks + [q.question for q in corpus.questions], len(chunks)


def top10(vectors: np.ndarray, n_chunks: int) -> np.ndarray:
    scores = vectors[n_chunks:] @ vectors[:n_chunks].T
    return np.argsort(-scores, axis=1, kind="stable")[:, :10]


def agreement(vectors: np.ndarray, reference: np.ndarray, n_chunks: int) -> tuple[float, float]:
    """(smallest per-text cosine, share of questions whose top-10 chunk set is unchanged)."""
    cosine = float(np.min(np.sum(vectors * reference, axis=1)))
    same = [
        set(a) == set(b)
        for a, b in zip(top10(vectors, n_chunks), top10(reference, n_chunks), strict=True)
    ]
    return cosine, float(np.mean(same))


def run_setting(
    spec: str,
    device: str,
    dtype: str,
    batch_size: int,
    texts: list[str],
    repeats: int,
    threads: int,
) -> tuple[dict[str, Any], np.ndarray]:
    import torch

    # batch 1 = each text alone, `threads` side by side (the CPU default: batch-independent
    # vectors); larger = batched on `threads` intra-op threads (the GPU default)
    encoder = Encoder(spec, device=device, threads=threads, per_text=batch_size == 1)
    model = encoder.model
    model.to(getattr(torch, dtype))  # also float32: a half-precision checkpoint loads as stored
    tokenizer, max_len = model.tokenizer, model.max_seq_length
    tokens = sum(min(len(ids), max_len) for ids in tokenizer(texts)["input_ids"])
    encoder.encode(texts[: 2 * batch_size], batch_size=batch_size)  # warm-up (CUDA context, JIT)

    def once() -> tuple[float, np.ndarray]:
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        vectors = encoder.encode(texts, batch_size=batch_size)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - started, vectors

    runs = [once() for _ in range(repeats)]
    seconds = statistics.median(t for t, _ in runs)
    row = {
        "device": device,
        "dtype": dtype,
        "batch_size": batch_size,
        "texts": len(texts),
        "tokens": tokens,
        "seconds": round(seconds, 4),
        "texts_per_s": round(len(texts) / seconds, 1),
        "tokens_per_s": round(tokens / seconds, 0),
    }
    return row, runs[-1][1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus", default=str(REPO / "resources" / "corpora" / "evidence-inference-ccby")
    )
    parser.add_argument("--encoder", default="minilm")
    parser.add_argument("--devices", nargs="+", default=["cpu"])
    parser.add_argument("--dtypes", nargs="+", default=["float32"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[32])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="CPU threads; 0 = every usable core")
    parser.add_argument("--max-texts", type=int, default=None)
    parser.add_argument("--save-vectors", default=None, help="write the first setting's vectors")
    parser.add_argument("--reference", default=None, help="compare with vectors saved elsewhere")
    parser.add_argument("--json", default=None, help="also write the table and host as JSON")
    args = parser.parse_args()

    import os

    import torch

    threads = args.threads or len(os.sched_getaffinity(0))
    texts, n_chunks = default_texts(Path(args.corpus))
    if args.max_texts:
        n_chunks = min(n_chunks, args.max_texts // 2)
        texts = texts[:n_chunks] + texts[-(args.max_texts - n_chunks) :]
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    host = {
        "cpu": cpu_description(),
        "gpu": gpu,
        "torch": torch.__version__,
        "cpu_threads": threads,
        "texts": f"{n_chunks} chunks + {len(texts) - n_chunks} questions",
    }
    for key, value in host.items():
        print(f"{key}: {value}")

    reference = np.load(args.reference) if args.reference else None
    rows = []
    for device in args.devices:
        if device == "cuda" and not torch.cuda.is_available():
            print("cuda: not available here; skipped")
            continue
        for dtype in args.dtypes:
            if device == "cpu" and dtype == "float16":
                continue  # float16 matmuls on CPU are emulated; bfloat16 is tried (AMX / avx512_bf16)
            for batch_size in args.batch_sizes:
                row, vectors = run_setting(
                    args.encoder, device, dtype, batch_size, texts, args.repeats, threads
                )
                if reference is None:
                    reference = vectors
                    if args.save_vectors:
                        np.save(args.save_vectors, vectors)
                row["min_cosine"], row["top10_same"] = agreement(vectors, reference, n_chunks)
                rows.append(row)
                print(
                    f"{device:>4} {dtype:>8} batch {batch_size:>4}: {row['seconds']:8.2f} s "
                    f"{row['texts_per_s']:9.1f} texts/s {row['tokens_per_s']:10.0f} tokens/s "
                    f"min cosine {row['min_cosine']:.6f} top-10 same {row['top10_same']:.3f}",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(json.dumps({"host": host, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
