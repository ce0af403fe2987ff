"""Hindsight's offline settings and budget knob (srb/systems/hindsight.py), and the record of
its own environment (srb.system_env). Its real ingest and recall, on a real PostgreSQL through
the caching endpoint, are in tests/test_store_workflow.py."""

from __future__ import annotations

import json

import pytest

from srb.errors import ConfigError
from srb.system_env import STAMP, read_env
from srb.systems import get_store_system
from srb.systems.hindsight import (
    CHARS_PER_TOKEN,
    REFERENCE_TIME,
    HindsightSystem,
    item_id,
    server_environment,
)
from srb.systems.store import Endpoint

ENDPOINT = Endpoint("http://127.0.0.1:4321/v1", "qwen2.5-coder-0.5b", "minilm", 384)


def test_every_model_call_goes_to_the_caching_endpoint() -> None:
    env = server_environment("postgresql://x", ENDPOINT, {"hindsight": {"llm_concurrency": 3}})
    assert env["HINDSIGHT_API_LLM_BASE_URL"] == ENDPOINT.base_url
    assert env["HINDSIGHT_API_EMBEDDINGS_OPENAI_BASE_URL"] == ENDPOINT.base_url
    assert env["HINDSIGHT_API_LLM_MODEL"] == "qwen2.5-coder-0.5b"
    assert env["HINDSIGHT_API_EMBEDDINGS_OPENAI_MODEL"] == "minilm"
    assert env["HINDSIGHT_API_EMBEDDINGS_PROVIDER"] == "openai"  # not the hub's local model
    assert env["HINDSIGHT_API_RERANKER_PROVIDER"] == "rrf"  # not the hub's cross-encoder
    assert env["HINDSIGHT_API_LLM_MAX_CONCURRENT"] == "3"


def test_structured_output_asks_for_the_strict_schema_the_endpoint_bounds() -> None:
    assert server_environment("u", ENDPOINT, {})["HINDSIGHT_API_LLM_STRICT_SCHEMA_RETAIN"] == "true"
    soft = server_environment("u", ENDPOINT, {"structured_output": False})
    assert "HINDSIGHT_API_LLM_STRICT_SCHEMA_RETAIN" not in soft  # its own json_object mode


def test_observations_are_off_unless_configured() -> None:
    assert server_environment("u", ENDPOINT, {})["HINDSIGHT_API_ENABLE_OBSERVATIONS"] == "false"
    on = server_environment("u", ENDPOINT, {"hindsight": {"observations": True}})
    assert on["HINDSIGHT_API_ENABLE_OBSERVATIONS"] == "true"


def test_the_retain_answer_cap_is_one_the_server_accepts() -> None:
    """The server refuses to start unless the cap exceeds its 3000-char retain chunk, and its
    default (64000) is more than a small model's server allows."""
    env = server_environment("u", ENDPOINT, {"max_completion_tokens": 2048})
    assert 3000 < int(env["HINDSIGHT_API_RETAIN_MAX_COMPLETION_TOKENS"]) < 64000
    assert float(env["HINDSIGHT_API_LLM_TIMEOUT"]) >= 600  # CPU answers take minutes


def test_items_have_stable_ids_and_a_fixed_timestamp() -> None:
    assert item_id("P1", "a fact") == item_id("P1", "a fact")
    assert item_id("P1", "a fact") != item_id("P2", "a fact")
    assert REFERENCE_TIME.startswith("2026-01-01")


def test_the_budget_knob_counts_tokens() -> None:
    system = HindsightSystem()
    assert system.knob_name == "max_tokens" and system.native_knob == 4096
    # a 2K-character budget asks for 2000 / 4 tokens, whatever the items' mean size
    assert system.calibrated_knob(2000, 90.0) == 2000 / CHARS_PER_TOKEN
    assert system.calibrated_knob(1, 90.0) == 1


def test_without_its_environment_the_error_names_the_rule() -> None:
    system = get_store_system("hindsight")
    assert system.own_environment
    fresh = HindsightSystem()
    with pytest.raises(ConfigError, match="system_env"):
        fresh.check_installed()


def test_a_stale_environment_record_is_refused(tmp_path) -> None:
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / STAMP).write_text("old\n")
    record = tmp_path / "hindsight.json"
    record.write_text(
        json.dumps({"venv": str(venv), "lock": "envs/hindsight.txt", "lock_sha256": "new"})
    )
    with pytest.raises(ConfigError, match="no longer matches envs/hindsight.txt"):
        read_env(record)
    (venv / STAMP).write_text("new\n")
    assert read_env(record)["venv"] == str(venv)


def test_its_extraction_schema_gets_tighter_bounds_than_the_endpoints_defaults() -> None:
    from srb.llm.proxy import MAX_SCHEMA_ITEMS, MAX_SCHEMA_STRING, bounded_request, schema_bounds

    system = HindsightSystem().configure({})
    items, chars = schema_bounds(system.schema_bounds())
    assert items < MAX_SCHEMA_ITEMS and chars < MAX_SCHEMA_STRING
    custom = HindsightSystem().configure({"hindsight": {"max_facts": 3, "max_field_chars": 90}})
    assert custom.schema_bounds() == (3, 90)
    assert HindsightSystem().configure({"structured_output": False}).schema_bounds() is False
    facts = {"type": "object", "properties": {"facts": {"type": "array", "items": {
        "type": "object", "properties": {"what": {"type": "string"}}}}}}  # fmt: skip
    body = {
        "response_format": {"type": "json_schema", "json_schema": {"name": "f", "schema": facts}}
    }
    bounded = bounded_request(body, 3, 90)["response_format"]["json_schema"]["schema"]
    fact_list = bounded["properties"]["facts"]
    assert fact_list["maxItems"] == 3
    assert fact_list["items"]["properties"]["what"]["maxLength"] == 90
    assert "maxItems" not in facts["properties"]["facts"]  # the library's own schema untouched


def test_a_request_that_fails_because_postgresql_died_names_its_data_directory(tmp_path) -> None:
    """Stand-ins for the server's PostgreSQL and HTTP client (the real ones are exercised in
    tests/test_pg.py and tests/test_store_workflow.py): only the reporting is tested here."""
    import httpx

    from srb.pg import PostgresError
    from srb.systems.hindsight import HindsightServer

    class DeadPostgres:
        cluster, log_file = tmp_path / "pgdata", tmp_path / "server.log"

        def running(self) -> bool:
            return False

        def _log_tail(self) -> str:
            return "FATAL:  terminating connection due to administrator command"

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    server = HindsightServer.__new__(HindsightServer)
    server.pg, server.proc = DeadPostgres(), None
    server.client = httpx.Client(
        base_url="http://127.0.0.1:9", transport=httpx.MockTransport(refuse)
    )
    with pytest.raises(PostgresError) as err:
        server.call("POST", "/v1/default/banks/srb/memories", "retain P1", json={})
    message = str(err.value)
    assert "retain P1: PostgreSQL died" in message and str(tmp_path / "pgdata") in message
    assert "server.log" in message and "administrator command" in message
    server.client = httpx.Client(
        base_url="http://x",
        transport=httpx.MockTransport(lambda r: httpx.Response(500, text="boom")),
    )
    with pytest.raises(PostgresError, match="recall: PostgreSQL died"):
        server.call("POST", "/recall", "recall", json={})


def test_a_question_whose_facts_fill_the_token_knob_did_not_run_short() -> None:
    from srb.retrieve import Restored

    knob = 250  # tokens: room for ~1000 characters
    full = Restored("q1", [("a", 2.0), ("b", 1.0)], ["x" * 500, "y" * 310], 1000, knob, False)
    short = Restored("q2", [("a", 1.0)], ["x" * 300], 1000, knob, False)
    # two facts that fill 810 of ~1000 characters: recall gave what the knob allowed
    assert HindsightSystem().ranking_lengths([full, short]) == [knob, 1]
    # a knob that counts items compares the number of hits (the contract's default)
    assert get_store_system("mem0").ranking_lengths([full, short]) == [2, 1]


def test_exact_repeats_of_a_fact_are_one_item_and_counted_as_duplicates() -> None:
    """A chunk Hindsight splits and asks again can store the same fact twice: the export holds
    it once (content ids), and the doctor compares like with like and names the repeats."""
    from srb.systems.hindsight import HindsightHandle

    records = [{"document_id": "p1", "text": "Aspirin lowered mortality."},
               {"document_id": "p1", "text": "Aspirin lowered mortality."},
               {"document_id": "p2", "text": "Aspirin lowered mortality."},  # another paper
               {"document_id": "p1", "text": "Blood pressure fell."}]  # fmt: skip
    handle = HindsightHandle.__new__(HindsightHandle)
    handle._list = lambda document_id=None: records
    assert len(handle.items()) == 3
    assert handle.native_count() == 3 and handle.duplicate_count() == 1
