"""The contract for memory systems that own their store (Mem0, Graphiti, and those to come).

Unit systems (`SystemSpec`) are exact character spans indexed by the workflow. A store system
instead rewrites papers with an LLM at ingest, keeps its own store and answers through its own
search API. The workflow only needs three things from one, each implemented in its module:

- `ingest_paper`: put one paper into the store directory (the workflow handles retries,
  per-paper failure records, the temporary directory and the ingest log);
- `open` -> a `StoreHandle` whose `items()` exports everything stored (for the item count,
  the BM25 channel and the ingest-cost table) and whose `search(query, channel, knob)` is the
  library's own retrieval with its own budget knob;
- its `modalities`: the retrieval modes it supports (Mem0: dense, hybrid; Graphiti: native,
  kg_only), so the grid expands per system.

Every model call the library makes goes to `endpoint` (srb.llm.proxy), never elsewhere.
Adding a system is one module defining `SYSTEM = <StoreSystem subclass>()`, its
`envs/<name>.txt` and config.
"""

from __future__ import annotations

import importlib.metadata
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from srb.data.schema import Paper
from srb.errors import ConfigError
from srb.llm.runaway import MAX_WHITESPACE_RUN

ENVS_DIR = Path(__file__).resolve().parents[2] / "envs"


@dataclass(frozen=True)
class Item:
    """One retrievable thing a store holds: a fact, an edge, a node or an episode."""

    item_id: str
    text: str
    paper_ids: tuple[str, ...]
    kind: str = "fact"
    score: float = 0.0
    span: tuple[int, int] | None = (
        None  # exact characters of paper_ids[0], when the store kept them
    )
    #: characters of paper_ids[0] the (rewritten) text was drawn from, e.g. a claim's quote
    provenance: tuple[int, int] | None = None

    def to_unit_record(self) -> dict[str, Any]:
        """The record the workflow's units files hold (start/end null: rewritten text)."""
        if not self.paper_ids:
            raise ValueError(f"item {self.item_id}: no source paper; every item needs one")
        return {
            "id": self.item_id,
            "paper_id": self.paper_ids[0],
            "paper_ids": list(self.paper_ids),
            "kind": self.kind,
            "start": self.span[0] if self.span else None,
            "end": self.span[1] if self.span else None,
            "text": self.text,
            **({"provenance": list(self.provenance)} if self.provenance and not self.span else {}),
        }


@dataclass(frozen=True)
class Endpoint:
    """Where the library sends its model calls: the caching endpoint's base URL and names."""

    base_url: str
    chat_model: str
    embedding_model: str
    embedding_dims: int


@dataclass
class SearchOutcome:
    items: list[Item]
    knob: dict[str, int] = field(default_factory=dict)  # what the library was asked for

    def to_dict(self) -> dict[str, Any]:
        return {"items": [asdict(i) for i in self.items], "knob": self.knob}


class StoreHandle(ABC):
    """An opened store: export and search."""

    @abstractmethod
    def items(self) -> list[Item]:
        """Every stored item, in a deterministic order."""

    @abstractmethod
    def search(self, query: str, modality: str, knob: int) -> list[Item]:
        """The library's retrieval for one query; `knob` is the system's budget knob value."""

    def native_count(self) -> int | None:
        """How many items the store itself holds, counted by the library or database (not
        through the export); None when it cannot tell. The doctor compares it with the export."""
        return None

    def duplicate_count(self) -> int:
        """Stored items that repeat another's paper and text exactly, which the export (content
        ids) holds once: not counted by `native_count`, reported by the doctor beside it."""
        return 0

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release files and connections."""


KNOB_REFINE_STEPS = 2  # the default of memory.knob_refine_steps (config/schema.yaml)


class StoreSystem(ABC):
    name: str
    description: str
    modalities: tuple[str, ...]
    #: the native (out-of-the-box) value of the library's budget knob, and the knob's name
    native_knob: int
    knob_name: str
    #: pinned distributions, read from envs/<requirements>
    requirements: str
    #: papers may be ingested concurrently (each paper is an independent scope in the store)
    concurrent_papers: bool = True
    #: the system answers with its own prompt (internal synthesis): native cells only
    internal_synthesis: bool = False
    #: modalities that answer by internal synthesis when the others do not (Cognee's
    #: graph_completion beside its budgeted chunks)
    internal_modalities: tuple[str, ...] = ()
    #: settings for services the system starts itself (the workflow's `llm` and `dense`
    #: config, set by srb.store.opened_store): a service opens its own caching endpoint
    services: Mapping[str, Any] = {}
    #: the `memory` config the system was configured with (see `configure`)
    options: Mapping[str, Any] = {}
    #: the library cannot share the project's environment: it runs from a venv of its own,
    #: built by rule `system_env` from envs/<requirements> (srb.system_env)
    own_environment: bool = False
    #: that venv's record (srb.system_env.ensure_env), set by `use_environment`
    environment: Mapping[str, Any] = {}

    def answers_itself(self, modality: str) -> bool:
        """Whether `modality`'s cells are answered with the system's own prompt (native only)."""
        return self.internal_synthesis or modality in self.internal_modalities

    def configure(self, memory: Mapping[str, Any]) -> StoreSystem:
        """Take the workflow's `memory` config (options such as `structured_output`)."""
        self.options = dict(memory)
        return self

    def use_environment(self, record_file: str | Path | Sequence[str] | None) -> StoreSystem:
        """Run from the venv rule `system_env` built (its record file); a no-op without one."""
        if isinstance(record_file, list | tuple):
            record_file = record_file[0] if record_file else None
        if record_file:
            from srb.system_env import read_env

            self.environment = read_env(record_file)
        return self

    def completion_cap(self) -> int | None:
        """The endpoint's cap on every answer's length for this system's calls (its ingest
        and its search): `memory.max_completion_tokens`; a system may lower it."""
        return self.options.get("max_completion_tokens")

    def whitespace_run_cap(self) -> int | None:
        """Consecutive whitespace characters that end an answer (srb.llm.runaway):
        `memory.max_whitespace_run`; None streams nothing and cuts nothing."""
        return self.options.get("max_whitespace_run", MAX_WHITESPACE_RUN)

    def endpoint_settings(self) -> dict[str, Any]:
        """How the caching endpoint shapes this system's calls (srb.store.memory_endpoint)."""
        return {
            "max_completion_tokens": self.completion_cap(),
            "bound_schemas": self.schema_bounds(),
            "max_whitespace_run": self.whitespace_run_cap(),
        }

    def ranking_lengths(self, raw: Sequence[Any]) -> list[int]:
        """How many items each question's search could give (srb.retrieve.Restored before the
        cap): the budget verdict calls a question "ran short" when this is below the knob,
        so a store that held no more is depth-limited, not under budget. The knob counts
        items here; a system whose knob counts something else overrides this."""
        return [len(c.hits) for c in raw]

    def schema_bounds(self) -> bool | tuple[int, int]:
        """Whether the endpoint bounds the JSON schemas this system's calls ask for
        (`memory.structured_output`), or a system's own (max items, max string chars)."""
        return bool(self.options.get("structured_output", True))

    def venv(self) -> Path:
        """The system's own venv (rule system_env's record); fails clearly without one."""
        self.check_installed()
        return Path(self.environment["venv"])

    def process_log_dir(self, kind: str) -> Path:
        """Where the processes a system starts per job (servers, workers) log: the workflow's
        log tree (jobs run in its directory)."""
        return Path.cwd() / "results" / "logs" / f"{self.name}-{kind}"

    def check_environment(self, record: Mapping[str, Any]) -> None:  # noqa: B027
        """What rule `system_env` checks once the venv is built (services it must start)."""

    def calibrated_knob(self, budget_chars: int, native_mean_item_chars: float) -> int:
        """The knob value for a calibrated cell: the paper's B / mean characters per item on
        the native run. A system whose knob is not a count of items overrides this."""
        from srb.retrieve import calibrated_top_k

        return calibrated_top_k(budget_chars, native_mean_item_chars)

    def knob_refine_steps(self) -> int:
        """How often a calibrated cell under budget may re-aim its knob (srb.store.
        restore_calibrated): `memory.knob_refine_steps`."""
        steps = self.options.get("knob_refine_steps")
        return KNOB_REFINE_STEPS if steps is None else int(steps)

    def refined_knob(self, knob: int, budget_chars: int, achieved_mean_chars: float) -> int:
        """The next knob for a cell whose `knob` restored `achieved_mean_chars` on average,
        aimed at the budget from the cell's own characters per knob unit (so it serves a
        knob counting tokens as well as items); always a larger knob."""
        if achieved_mean_chars <= 0:
            return knob
        return max(knob + 1, round(knob * budget_chars / achieved_mean_chars))

    @abstractmethod
    def ingest_paper(self, paper: Paper, store_dir: Path, endpoint: Endpoint) -> int:
        """Add one paper to the store; return how many items the library reports it stored."""

    @abstractmethod
    def forget_paper(self, paper: Paper, store_dir: Path, endpoint: Endpoint) -> None:
        """Remove whatever a failed attempt at `paper` left in the store, so a retry starts
        from the same state (and sends the same prompts) and a failed paper leaves no items."""

    @abstractmethod
    def open(self, store_dir: Path, endpoint: Endpoint) -> StoreHandle:
        """Open the (finished) store for export and search."""

    def prepare(self, store_dir: Path, endpoint: Endpoint) -> None:  # noqa: B027
        """Create an empty store before the papers go in (indices, schema)."""

    def finish(self, store_dir: Path, endpoint: Endpoint) -> None:  # noqa: B027
        """Flush and close whatever ingest left open, before the store is moved into place."""

    def settle(  # noqa: B027
        self, store_dir: Path, endpoint: Endpoint, papers: Sequence[Paper]
    ) -> None:
        """After every paper is in (`papers`: those that went in, in the order given), before
        the items are listed: a system whose store depends on the order in which its
        concurrent ingests completed rebuilds it here in a fixed order (Hindsight), so the
        same model answers always give the same store."""

    def live_items(self, store_dir: Path, endpoint: Endpoint) -> list[Item] | None:
        """Everything stored, read from the ingest's still-open store just before `finish`;
        None = export through `open` after `finish`. For a system whose `open` starts
        services again (Hindsight: PostgreSQL and its API; Cognee: a worker on a copy of the
        store), which on 2 busy cores took minutes for a list the ingest could give at once."""
        return None

    def ingest_report(self, store_dir: Path) -> dict[str, Any]:
        """What the system itself counted during ingest (failed passes, layer sizes), for the
        ingest log; `store_dir` is the finished staging store."""
        return {}

    def check_installed(self) -> None:
        """Fail clearly when the library is missing or not the pinned version."""
        if not self.own_environment:
            check_pins(self.name, ENVS_DIR / self.requirements)
        elif not self.environment:
            raise ConfigError(
                f"system {self.name} runs from its own environment (envs/{self.requirements}), "
                "built by the workflow's rule system_env; no environment record was given"
            )


_PIN = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*([^\s;#]+)")


def check_pins(system: str, requirements: Path) -> None:
    """Every `name==version` line of `requirements` is installed at that version."""
    if not requirements.is_file():
        raise ConfigError(f"system {system}: its requirements file {requirements} is missing")
    problems = []
    for line in requirements.read_text().splitlines():
        m = _PIN.match(line)
        if not m:
            continue
        name, wanted = m.groups()
        try:
            got = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"{name} is not installed (wanted {wanted})")
            continue
        if got != wanted:
            problems.append(f"{name} {got} is installed, {wanted} is pinned")
    if problems:
        raise ConfigError(
            f"system {system}: {'; '.join(problems)}; install the pins with "
            f"`pip install --no-deps -r {requirements}` (or `make setup`)"
        )
