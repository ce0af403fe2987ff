"""Open-weight models from registry packages (or local paths) into servable model directories.

The embedded default's models ship inside PyPI wheels as GGUF files (whole, or cut into numbered
parts). Preparing one joins the parts, checks the GGUF's sha256 against the pin in config (a wrong
or partial download must never be served), dequantises it with transformers and saves plain
safetensors that vLLM and transformers both load. The weights' own sha256 is recorded and goes
into every cache key, so a changed model can never replay another model's answers.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MODEL_CARD = "srb-model.json"


class ModelError(RuntimeError):
    pass


def sha256_file(path: str | Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)  # locate without importing (some need absent deps)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"package {package!r} is not installed (run `make setup`)")
    return Path(next(iter(spec.submodule_search_locations)))


def gguf_sources(source: dict[str, Any]) -> list[Path]:
    """The GGUF file, or its parts in order, named by a model's `source` config."""
    if "package" in source:
        path = _package_dir(source["package"]) / source["file"]
        if not path.is_file():
            raise ModelError(f"{path} missing from package {source['package']!r}")
        return [path]
    if "parts" in source:
        prefix, count = source["parts"], int(source["count"])
        paths = []
        for i in range(1, count + 1):
            found = sorted((_package_dir(f"{prefix}{i}") / "data").glob("part*.bin"))
            if len(found) != 1:
                raise ModelError(f"package {prefix}{i}: expected one data/part*.bin, found {found}")
            paths.append(found[0])
        return paths
    raise ModelError(f"model source {source} names neither 'package' nor 'parts'")


def check_sources_present(models: dict[str, dict[str, Any]], names: list[str]) -> None:
    """Cheap parse-time check: every model the run needs is installed (a local path is checked
    by prepare_model) and its settings agree."""
    for name in names:
        spec = models.get(name)
        if spec is None:
            raise ModelError(f"model {name!r} is not defined under llm.models")
        source = spec.get("source", {})
        if "path" not in source and "served_name" not in source:  # a local path is checked
            try:  # by prepare_model, so a dry run works where it is absent
                gguf_sources(source)
            except ModelError as exc:
                raise ModelError(f"model {name!r}, llm.models.{name}.source: {exc}") from None
        vllm_options(name, spec)  # two disagreeing max_model_len fail here, before any job


def join_gguf(parts: list[Path], out: Path) -> str:
    digest = hashlib.sha256()
    with open(out, "wb") as dst:
        for part in parts:
            with open(part, "rb") as src:
                while block := src.read(1 << 22):
                    digest.update(block)
                    dst.write(block)
    return digest.hexdigest()


def dequantise_gguf(gguf: Path, out_dir: Path) -> None:
    """GGUF -> float safetensors via transformers (needs `gguf` and `accelerate`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16
    )
    # weights are plain floats now; transformers refuses to save a model still marked as GGUF
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def weights_sha256(model_dir: Path) -> str:
    digest = hashlib.sha256()
    for f in sorted(model_dir.glob("*.safetensors")):
        digest.update(f.name.encode())
        digest.update(sha256_file(f).encode())
    return digest.hexdigest()


def prepare_model(name: str, spec: dict[str, Any], out_dir: str | Path) -> dict[str, Any]:
    """Build `out_dir` for a packaged GGUF model; verify the pinned GGUF sha256 first."""
    out_dir = Path(out_dir)
    source = spec["source"]
    parts = gguf_sources(source)
    expected = spec.get("gguf_sha256")
    with tempfile.TemporaryDirectory(
        dir=out_dir.parent if out_dir.parent.exists() else None, prefix=".model-"
    ) as tmp:
        gguf = Path(tmp) / "model.gguf"
        got = join_gguf(parts, gguf)
        if expected and got != expected:
            raise ModelError(
                f"model {name!r}, llm.models.{name}.gguf_sha256: the GGUF's sha256 {got} "
                f"does not match the pinned {expected} "
                f"(from {parts[0].parent.parent.name}...); refusing to serve it"
            )
        staging = Path(tmp) / "model"
        log.info("dequantising %s (%d part(s), sha256 %s)", name, len(parts), got[:12])
        dequantise_gguf(gguf, staging)
        card = {
            "name": name,
            "source": source,
            "gguf_sha256": got,
            "weights_sha256": weights_sha256(staging),
            "chat_template": (staging / "chat_template.jinja").is_file()
            or "chat_template" in json.loads((staging / "tokenizer_config.json").read_text()),
        }
        (staging / MODEL_CARD).write_text(json.dumps(card, indent=1, sort_keys=True) + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), out_dir)
    return card


#: Files beside the weights that change answers: tokenizer, chat template and special tokens,
#: the architecture config, and generation_config.json (vLLM takes its default sampling from it).
ANSWER_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
)


def card_path(models_dir: str | Path, name: str) -> Path:
    """Where rule prepare_model writes a model's card (every source type but a served one)."""
    return Path(models_dir) / f"{name}.card.json"


def answer_files_sha256(model_dir: str | Path) -> dict[str, str]:
    """sha256 of each answer-changing file present in `model_dir` (absent ones are left out)."""
    root = Path(model_dir)
    return {f: sha256_file(root / f) for f in ANSWER_FILES if (root / f).is_file()}


def vllm_options(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The model's `vllm` options with `max_model_len` taken from the model itself (the source
    of truth, also used to fit prompts); a disagreeing `vllm.max_model_len` is an error."""
    opts = dict(spec.get("vllm") or {})
    model_len = spec.get("max_model_len")
    if model_len is None:
        return opts
    if "max_model_len" in opts and int(opts["max_model_len"]) != int(model_len):
        raise ModelError(
            f"model {name!r}: vllm.max_model_len ({opts['max_model_len']}) disagrees with "
            f"max_model_len ({model_len}); set only max_model_len (the server uses it)"
        )
    opts["max_model_len"] = int(model_len)
    return opts


def serving_identity(opts: dict[str, Any]) -> dict[str, Any]:
    """The vLLM server options that change answers, resolved (dtype `auto` -> what this host
    runs). Port, KV-cache size, start timeout/attempts and threads/binding do not."""
    from srb.llm.cpu import resolve_dtype

    return {
        "dtype": resolve_dtype(opts.get("dtype"))[0],
        "max_model_len": None if opts.get("max_model_len") is None else int(opts["max_model_len"]),
        "quantization": opts.get("quantization"),
        "enforce_eager": bool(opts.get("enforce_eager", True)),
        "extra_args": [str(a) for a in opts.get("extra_args", [])],
    }


def _read_card(*candidates: Path) -> dict[str, Any] | None:
    for path in candidates:
        if path.is_file():
            return json.loads(path.read_text())
    return None


def model_identity(
    name: str,
    spec: dict[str, Any],
    backend: str,
    model_dir: str | Path | None = None,
    models_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Everything about the model that decides its answers, for every source type; the call
    cache keys on it. Packaged or local-path models: the weights hash from the prepared card
    (or the pinned `revision` of a local path), the tokenizer/template/config files' hashes and,
    for vLLM, the answer-changing server options. A served endpoint: its base URL and name."""
    source = spec.get("source", {})
    if "served_name" in source:
        return {
            "model": str(source["served_name"]),
            "weights": str(spec.get("revision") or "unpinned"),
            "endpoint": str(source.get("base_url", "")).rstrip("/"),
            "files": {},
            "serving": {},
        }
    rule_card = [card_path(models_dir, name)] if models_dir is not None else []
    if "path" in source:
        files_dir = Path(source["path"])
        card = _read_card(*rule_card)
        current = (
            card is not None
            and card.get("source") == source
            and card.get("revision") == spec.get("revision")
        )
        if current:
            weights = str(card["weights_sha256"])  # type: ignore[index]
        elif spec.get("revision"):
            weights = str(spec["revision"])
        else:
            raise ModelError(
                f"model {name!r}: no current card at {rule_card[0] if rule_card else '?'} and "
                "no pinned revision; run rule prepare_model (or pin `revision`)"
            )
    else:
        if model_dir is None and models_dir is not None:
            model_dir = Path(models_dir) / name
        files_dir = Path(model_dir) if model_dir is not None else None
        inner = [files_dir / MODEL_CARD] if files_dir is not None else []
        card = _read_card(*inner, *rule_card)
        if card is None:
            raise ModelError(f"no model card in {model_dir}; prepare the model first")
        weights = str(card["weights_sha256"])
    return {
        "model": name,
        "weights": weights,
        "endpoint": None,
        "files": answer_files_sha256(files_dir) if files_dir is not None else {},
        "serving": serving_identity(vllm_options(name, spec)) if backend == "vllm" else {},
    }


def ensure_model(name: str, spec: dict[str, Any], models_dir: str | Path) -> dict[str, Any]:
    """Prepare `models_dir/name` unless it is already there and verifies: the recorded GGUF hash
    equals the pin and the weights still hash to what was recorded. Returns the model card."""
    if "path" in spec["source"]:
        return local_model_card(name, spec)
    model_dir = Path(models_dir) / name
    card_file = model_dir / MODEL_CARD
    pinned = spec.get("gguf_sha256")
    if card_file.is_file():
        card = json.loads(card_file.read_text())
        if (not pinned or card.get("gguf_sha256") == pinned) and card.get("source") == spec[
            "source"
        ]:
            if weights_sha256(model_dir) == card["weights_sha256"]:
                log.info(
                    "model %s verified in %s (weights %s)",
                    name,
                    model_dir,
                    card["weights_sha256"][:12],
                )
                return card
            log.warning(
                "model %s: weights in %s changed since preparation; rebuilding", name, model_dir
            )
    return prepare_model(name, spec, model_dir)


def local_model_card(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A model already on disk (a GPU host's HF checkpoint): check it is servable and record its
    weights hash, or the pinned `revision` when hashing hundreds of GB is not wanted."""
    path = Path(spec["source"]["path"])
    if not (path / "config.json").is_file():
        raise ModelError(f"model {name!r}: {path} is not a model directory (no config.json)")
    weights = spec.get("revision") or weights_sha256(path)
    if not spec.get("revision") and not list(path.glob("*.safetensors")):
        raise ModelError(f"model {name!r}: no *.safetensors in {path}; pin a `revision` instead")
    return {
        "name": name,
        "source": spec["source"],
        "weights_sha256": weights,
        "revision": spec.get("revision"),
    }
