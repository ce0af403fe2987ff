"""Corpus loading: one entry point that dispatches on the configured loader."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from srb.data.schema import Corpus, DataError

LOADERS = ("canonical", "hf", "published", "evidence_inference")


def load_corpus(
    name: str, spec: dict[str, Any], base: str | Path = "."
) -> tuple[Corpus, list[str]]:
    """Load corpus `name` as configured; returns it with the loader's list of parse problems."""
    loader = spec.get("loader", "canonical")
    path = spec.get("path")
    where = f"config corpus_sources.{name}"
    if path is not None:
        path = Path(base, path)
        if loader != "hf" and not path.exists():
            raise DataError(path, None, None, f"corpus source of {name!r} does not exist ({where})")
    if loader == "canonical":
        from srb.data.canonical import load_canonical

        return load_canonical(path, name=name), []
    if loader == "evidence_inference":
        from srb.data.evidence_inference import load_evidence_inference

        return load_evidence_inference(path, name=name), []
    if loader == "published":
        from srb.data.published import load_published

        corpus, problems = load_published(path, spec["published_name"])
        return replace(corpus, name=name), problems
    if loader == "hf":
        from srb.data.hf import load_hf

        source = str(path) if path is not None else spec["source"]
        return load_hf(source, spec.get("papers", {}), spec.get("questions", {}), name=name), []
    raise DataError(where, None, "loader", f"unknown loader {loader!r}; expected one of {LOADERS}")


__all__ = ["Corpus", "DataError", "LOADERS", "load_corpus"]
