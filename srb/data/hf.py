"""Load any Hugging Face `datasets` dataset into canonical records, without requiring the network.

Benchmarks published on the Hub come in every column layout, so the caller maps canonical fields
to source columns and everything else (casting ids, wrapping single strings into lists) happens
here. Sources are local first: a `save_to_disk` directory, a directory or file of
json/jsonl/parquet/csv, or a Hub id served from whatever cache exists. Nothing here forces network
access, and a Hub id that is not cached is a DataError that says so, not a long retry loop in a job
log.

Config (one for papers, one for questions)::

    {"source": "...",            # optional, overrides the positional source
     "split": "train", "subset": None, "data_files": None,
     "columns": {"id": "doc_id", "text": "body"}}
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from srb.data.schema import (
    Corpus,
    DataError,
    Paper,
    Question,
    paper_from_dict,
    question_from_dict,
    validate_corpus,
)

if TYPE_CHECKING:
    import datasets

log = logging.getLogger(__name__)

PAPER_FIELDS = ("id", "title", "text", "source", "licence")
QUESTION_FIELDS = (
    "id",
    "question",
    "gold_answer",
    "must_have",
    "paper_ids",
    "tier",
    "types",
    "evidence",
    "gold_label",
    "meta",
)
_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".tsv": "csv"}
_COMPRESSION = (".gz", ".bz2", ".xz", ".zst", ".zip")


def load_hf(
    source: str,
    papers_config: Mapping[str, Any],
    questions_config: Mapping[str, Any],
    *,
    name: str,
) -> Corpus:
    """Build a validated Corpus from one or two Hugging Face datasets (papers and questions)."""
    p_src, p_split, p_label, p_rows = _load_rows(source, papers_config, PAPER_FIELDS)
    q_src, q_split, q_label, q_rows = _load_rows(source, questions_config, QUESTION_FIELDS)

    papers: list[Paper] = []
    for i, rec in p_rows:
        rec.setdefault("source", p_label)
        papers.append(paper_from_dict(rec, p_label, i))
    questions: list[Question] = []
    for i, rec in q_rows:
        meta = rec.get("meta")
        if isinstance(meta, dict) or meta is None:
            rec["meta"] = {"hf_source": q_label, **(meta or {})}
        questions.append(question_from_dict(rec, q_label, i))

    corpus = Corpus(
        name=name,
        papers=tuple(papers),
        questions=tuple(questions),
        manifest={
            "format": "hf",
            "papers": {"source": p_src, "split": p_split, "subset": papers_config.get("subset")},
            "questions": {
                "source": q_src,
                "split": q_split,
                "subset": questions_config.get("subset"),
            },
        },
    )
    validate_corpus(corpus, p_label, q_label)
    log.info(
        "loaded %s from %s: %d papers, %d questions", name, q_label, len(papers), len(questions)
    )
    return corpus


def _load_rows(
    default_source: str, config: Mapping[str, Any], fields: tuple[str, ...]
) -> tuple[str, str, str, list[tuple[int, dict[str, Any]]]]:
    """Load one split and turn its rows into canonical-field dicts (not yet validated)."""
    src = str(config.get("source") or default_source)
    split = str(config.get("split") or "train")
    subset = config.get("subset")
    label = f"hf:{src}" + (f"/{subset}" if subset else "") + f"[{split}]"
    ds = _load_split(src, split, subset, config.get("data_files"), label)
    mapping = _column_mapping(config.get("columns") or {}, fields, list(ds.column_names), label)
    ds = ds.select_columns(sorted(set(mapping.values())))
    rows = []
    for i, row in enumerate(ds):
        rec: dict[str, Any] = {}
        for fld, col in mapping.items():
            value = _CONVERT.get(fld, _keep)(row[col])
            if value is not None:
                rec[fld] = value
        rows.append((i, rec))
    return src, split, label, rows


def _column_mapping(
    columns: Mapping[str, Any], fields: tuple[str, ...], available: list[str], label: str
) -> dict[str, str]:
    """Explicit mapping first; a source column already named like a canonical field maps itself."""
    if not isinstance(columns, Mapping):
        raise DataError(label, None, "columns", "expected a mapping canonical field -> column")
    mapping: dict[str, str] = {}
    for fld, col in columns.items():
        if fld not in fields:
            raise DataError(
                label, None, f"columns.{fld}", f"not a canonical field; expected one of {fields}"
            )
        if col not in available:
            raise DataError(
                label,
                None,
                f"columns.{fld}",
                f"column {col!r} not in the dataset; available columns: {', '.join(available)}",
            )
        mapping[fld] = str(col)
    for fld in fields:
        if fld not in mapping and fld in available:
            mapping[fld] = fld
    return mapping


def _load_split(
    src: str, split: str, subset: str | None, data_files: Any, label: str
) -> datasets.Dataset:
    import datasets  # deferred: importing datasets costs seconds that most srb commands never need

    path = Path(src).expanduser()
    if path.exists():
        if subset and (path / subset).is_dir():
            path = path / subset
        if path.is_dir() and _is_saved(path):
            return _pick_split(datasets.load_from_disk(str(path)), split, label)
        files = _data_files(path, split, data_files, label)
        builder, kwargs = _builder(files, label)
        try:
            ds = datasets.load_dataset(
                builder, data_files={split: [str(f) for f in files]}, split=split, **kwargs
            )
        except Exception as exc:  # pyarrow / builder errors: name the files, keep the cause
            raise DataError(label, None, None, f"could not read {builder} files: {exc}") from exc
        return _pick_split(ds, split, label)
    if src.startswith(("/", "./", "../", "~")) or _builder_of(Path(src)) is not None:
        raise DataError(src, None, None, "local dataset path does not exist")
    try:
        ds = datasets.load_dataset(src, subset, data_files=data_files, split=split)
    except ValueError as exc:
        if "split" in str(exc).lower():
            raise DataError(label, None, "split", str(exc)) from exc
        raise DataError(label, None, None, f"could not load Hugging Face dataset: {exc}") from exc
    except Exception as exc:  # offline: ConnectionError, DatasetNotFoundError, ...
        raise DataError(
            src,
            None,
            None,
            f"Hugging Face dataset {src!r} is not in the local cache and could not be fetched "
            f"(no local path of that name either): {type(exc).__name__}: {exc}",
        ) from exc
    return _pick_split(ds, split, label)


def _is_saved(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (
        (path / "dataset_info.json").is_file() and (path / "state.json").is_file()
    )


def _pick_split(ds: Any, split: str, label: str) -> datasets.Dataset:
    """A DatasetDict must contain the split; a bare Dataset is the split, whatever its name."""
    import datasets

    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise DataError(
                label, None, "split", f"no split {split!r}; available splits: {', '.join(ds)}"
            )
        return ds[split]
    if not isinstance(ds, datasets.Dataset):
        raise DataError(label, None, None, f"expected a Dataset, got {type(ds).__name__}")
    return ds


def _builder_of(path: Path) -> str | None:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in _COMPRESSION:
        suffixes = suffixes[:-1]
    return _BUILDERS.get(suffixes[-1]) if suffixes else None


def _data_files(path: Path, split: str, data_files: Any, label: str) -> list[Path]:
    """Resolve data_files (globs relative to the source) or find the split's files by name."""
    if path.is_file():
        return [path]
    if data_files:
        if isinstance(data_files, Mapping):
            if split not in data_files:
                raise DataError(
                    label, None, "data_files", f"no entry for split {split!r} in {data_files}"
                )
            data_files = data_files[split]
        patterns = [data_files] if isinstance(data_files, str) else list(data_files)
        files: list[Path] = []
        for pattern in patterns:
            found = sorted(p for p in path.glob(str(pattern)) if p.is_file())
            if not found:
                raise DataError(label, None, "data_files", f"{pattern!r} matches no file in {path}")
            files.extend(found)
        return files
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and _builder_of(p) is not None
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
    )
    if not files:
        raise DataError(path, None, None, "no json/jsonl/parquet/csv files in the directory")
    pattern = re.compile(rf"(^|[/_.\-]){re.escape(split)}([/_.\-]|$)")
    named = [p for p in files if pattern.search(p.relative_to(path).as_posix())]
    return named or files


def _builder(files: list[Path], label: str) -> tuple[str, dict[str, Any]]:
    kinds = {_builder_of(f) for f in files}
    if len(kinds) != 1 or None in kinds:
        names = ", ".join(f.name for f in files)
        raise DataError(
            label, None, "data_files", f"mixed or unknown file types ({names}); set data_files"
        )
    builder = kinds.pop()
    assert builder is not None
    tsv = all(".tsv" in [s.lower() for s in f.suffixes] for f in files)
    return builder, ({"sep": "\t"} if tsv else {})


def _keep(value: Any) -> Any:
    return value


def _scalar_str(value: Any) -> Any:
    """Ids and labels are strings in srb; sources often store them as ints (or floats via CSV)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def _text(value: Any) -> Any:
    return "" if value is None else _scalar_str(value)


def _str_list(value: Any) -> Any:
    if value is None:
        return []
    if isinstance(value, str | int) and not isinstance(value, bool):
        return [_scalar_str(value)]
    if isinstance(value, list | tuple):
        return [_scalar_str(v) for v in value]
    return value


def _types(value: Any) -> Any:
    items = _str_list(value)
    if isinstance(items, list):
        return [v.strip().lower() if isinstance(v, str) else v for v in items]
    return items


def _tier(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return f"L{value}"
    if isinstance(value, str):
        v = value.strip().upper()
        return f"L{v}" if v in ("1", "2", "3") else v
    return value


def _evidence(value: Any) -> Any:
    """Accept a list of spans or the dict-of-lists a `Sequence` feature of structs decodes into."""
    if value is None:
        return []
    if isinstance(value, dict) and all(isinstance(v, list) for v in value.values()):
        keys = list(value)
        value = [dict(zip(keys, vals, strict=True)) for vals in zip(*value.values(), strict=True)]
    if isinstance(value, list):
        return [
            {**ev, "paper_id": _scalar_str(ev.get("paper_id"))} if isinstance(ev, dict) else ev
            for ev in value
        ]
    return value


_CONVERT: dict[str, Callable[[Any], Any]] = {
    "id": _scalar_str,
    "gold_label": _scalar_str,
    "gold_answer": _text,
    "title": _text,
    "source": _scalar_str,
    "licence": _scalar_str,
    "must_have": _str_list,
    "paper_ids": _str_list,
    "types": _types,
    "tier": _tier,
    "evidence": _evidence,
}

__all__ = ["load_hf", "PAPER_FIELDS", "QUESTION_FIELDS"]
