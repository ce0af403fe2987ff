"""Semantic config checks beyond the JSON schema: names that must exist, budgets that must parse."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from srb.errors import ConfigError
from srb.retrieve import parse_budget
from srb.systems import registry, store_registry


def validate_schema(config: dict[str, Any], schema: str | Path, source: str = "config") -> None:
    """Snakemake's JSON-schema validation (defaults filled in), with a failure named by file
    and key path (`budgets[1]`) instead of a bare "Error validating config file"."""
    import jsonschema
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    try:
        validate(config, str(schema))
    except WorkflowError as exc:
        found = [
            a for a in (*exc.args, exc.__context__) if isinstance(a, jsonschema.ValidationError)
        ]
        if not found:
            raise
        err = found[0]
        key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
        raise ConfigError(f"{source}: {key.lstrip('.') or '(top level)'}: {err.message}") from None


def apply_shared_storage(config: dict[str, Any]) -> None:
    """`shared_storage: true` (set by profiles/slurm): the run directory is on a cluster's shared
    file system, where SQLite's WAL is not safe, so a `*.sqlite` LLM-call or embedding cache
    becomes the directory of the same name without the suffix (files linked into place, see
    srb/llm/cache.py and srb/index/embed_cache.py). A cache path given without the suffix is a
    directory already and stays as it is."""
    if not config.get("shared_storage"):
        return
    for section in ("llm", "dense"):
        part = config.get(section) or {}
        cache = part.get("cache")
        if isinstance(cache, str) and cache.endswith(".sqlite"):
            part["cache"] = cache.removesuffix(".sqlite")


def check_config(config: dict[str, Any], source: str = "config") -> None:
    known = registry()
    for name in config.get("systems", []):
        if name not in known:
            raise ConfigError(
                f"{source}: systems: unknown system {name!r}; known: {', '.join(sorted(known))}"
            )
    check_memory_config(config, source)
    for budget in config.get("budgets", []):
        try:
            parse_budget(budget)
        except ValueError as exc:
            raise ConfigError(f"{source}: budgets: {exc}") from None
    sources = config.get("corpus_sources", {})
    for name in config.get("corpora", []):
        if name not in sources:
            raise ConfigError(f"{source}: corpora: {name!r} has no entry under corpus_sources")
    for name, spec in sources.items():
        loader = spec.get("loader", "canonical")
        where = f"{source}: corpus_sources.{name}"
        if loader == "published" and not spec.get("published_name"):
            raise ConfigError(f"{where}: the published loader needs 'published_name'")
        if loader == "hf" and not (spec.get("path") or spec.get("source")):
            raise ConfigError(f"{where}: the hf loader needs 'path' or 'source'")
        if loader in ("canonical", "published", "evidence_inference") and not spec.get("path"):
            raise ConfigError(f"{where}: the {loader} loader needs 'path'")


def check_llm_config(config: dict[str, Any], source: str = "config") -> None:
    llm = config["llm"]
    models = llm.get("models", {})
    roles = [("synthesizer", llm["synthesizer"])]
    roles += [("judges", j) for j in llm.get("judges", []) if j != "rubric"]
    for role, name in roles:
        if name not in models:
            raise ConfigError(
                f"{source}: llm.{role}: model {name!r} is not defined under llm.models"
            )
    retrieval = [*config.get("systems", []), *config.get("memory", {}).get("systems", [])]
    for name in llm.get("systems", []):
        if name not in retrieval:
            raise ConfigError(
                f"{source}: llm.systems: {name!r} is not in systems or memory.systems"
            )
    synthesized = [*llm.get("systems", []), *llm.get("llm_only", [])]
    for name in llm.get("judge_systems") or []:
        if name not in synthesized:
            raise ConfigError(
                f"{source}: llm.judge_systems: {name!r} is not synthesized "
                f"(llm.systems or llm.llm_only: {', '.join(synthesized)})"
            )
    for name in llm.get("modalities") or []:
        if name not in config.get("modalities", []):
            raise ConfigError(
                f"{source}: llm.modalities: {name!r} is not in modalities "
                f"({', '.join(config.get('modalities', []))})"
            )
    try:
        parse_budget(llm.get("direct_read_budget", "6K"))
    except ValueError as exc:
        raise ConfigError(f"{source}: llm.direct_read_budget: {exc}") from None
    for role, path in llm.get("prompts", {}).items():
        if not Path(path).is_file():
            raise ConfigError(f"{source}: llm.prompts.{role}: template {path} does not exist")
        check_template(role, path, source)


# The placeholders each prompt is filled with (srb.synthesize, srb.judge); a template missing a
# required one would silently drop the context or the question from every prompt.
TEMPLATE_FIELDS = {
    "synthesize": ({"question", "context"}, {"question", "context"}),
    "synthesize_base": ({"question"}, {"question", "context"}),
    "judge": (
        {"question", "answer"},
        {"question", "answer", "context", "gold_answer", "must_have"},
    ),
}
SYSTEM_TEMPLATE_FIELDS = ({"question", "context"}, {"question", "context"})


def check_template(role: str, path: str | Path, source: str = "config") -> None:
    """The template parses as a format string and has exactly the placeholders its role fills."""
    import string

    required, allowed = TEMPLATE_FIELDS.get(role, SYSTEM_TEMPLATE_FIELDS)
    try:
        text = Path(path).read_text(encoding="utf-8")
        fields = {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{source}: llm.prompts.{role}: template {path} is not UTF-8: {exc}"
        ) from None
    except ValueError as exc:  # a lone brace
        raise ConfigError(
            f"{source}: llm.prompts.{role}: template {path} does not parse ({exc}); "
            "write a literal brace as {{ or }}"
        ) from None
    missing, unknown = required - fields, fields - allowed
    if missing:
        raise ConfigError(
            f"{source}: llm.prompts.{role}: template {path} lacks placeholder(s) "
            f"{', '.join('{' + f + '}' for f in sorted(missing))}"
        )
    if unknown:
        raise ConfigError(
            f"{source}: llm.prompts.{role}: template {path} has unknown placeholder(s) "
            f"{', '.join('{' + f + '}' for f in sorted(unknown))}; it is filled with "
            f"{', '.join('{' + f + '}' for f in sorted(allowed))}"
        )


def check_memory_config(config: dict[str, Any], source: str = "config") -> None:
    """memory.systems name store systems; their ingest model is a configured LLM."""
    memory = config.get("memory") or {}
    systems = memory.get("systems", [])
    if not systems:
        return
    known = store_registry()
    for name in systems:
        if name not in known:
            raise ConfigError(
                f"{source}: memory.systems: unknown store system {name!r}; "
                f"known: {', '.join(sorted(known))}"
            )
        if name in config.get("systems", []):
            raise ConfigError(f"{source}: {name!r} is listed in both systems and memory.systems")
    llm = config.get("llm")
    if not llm:
        raise ConfigError(
            f"{source}: memory.systems needs an `llm` section: their ingest calls a model"
        )
    dense = config.get("dense") or {}
    if "cache" in dense and not dense["cache"]:  # absent = the schema's default cache
        raise ConfigError(
            f"{source}: memory.systems needs dense.cache: every embedding a memory library "
            "asks for goes through the embedding cache, so a rerun replays it"
        )
    if memory.get("llm") not in llm.get("models", {}):
        raise ConfigError(
            f"{source}: memory.llm: model {memory.get('llm')!r} is not defined under llm.models"
        )
    if {"theoria", "prism"} & set(systems):  # checked here, not first in the ingest job
        from srb.theoria.options import TheoriaOptions

        try:
            TheoriaOptions.from_config(memory.get("theoria"))
        except (ConfigError, TypeError) as exc:
            raise ConfigError(f"{source}: {exc}") from None
