"""Cognee's offline settings, its worker protocol, and how its graph becomes items
(srb/systems/cognee.py, srb/systems/cognee_worker.py). Its real ingest and search through the
caching endpoint run in the workflow (tests/test_store_workflow.py, `make run`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from srb.errors import ConfigError
from srb.systems import get_store_system
from srb.systems.cognee import (
    WORKER,
    CogneeSystem,
    edge_papers,
    export_items,
    item_id,
    paper_attribution,
    search_items,
    tokenizer_cache,
    tokenizer_repo,
    worker_environment,
)
from srb.systems.cognee_worker import node_title, render_edge, render_node
from srb.systems.store import Endpoint

ENDPOINT = Endpoint("http://127.0.0.1:4321/v1", "qwen2.5-coder-0.5b", "minilm", 384)


def test_every_model_call_goes_to_the_caching_endpoint(tmp_path) -> None:
    env = worker_environment(tmp_path / "store", tmp_path / "hf", ENDPOINT)
    assert env["LLM_ENDPOINT"] == env["EMBEDDING_ENDPOINT"] == ENDPOINT.base_url
    assert env["LLM_PROVIDER"] == "custom"
    assert env["LLM_MODEL"] == "hosted_vllm/qwen2.5-coder-0.5b"  # litellm's vLLM route
    assert env["EMBEDDING_PROVIDER"] == "openai_compatible"
    assert env["EMBEDDING_DIMENSIONS"] == "384"


def test_its_files_live_in_the_store_and_nothing_reaches_a_hub(tmp_path) -> None:
    env = worker_environment(tmp_path / "store", tmp_path / "hf", ENDPOINT)
    for key in ("SYSTEM_ROOT_DIRECTORY", "DATA_ROOT_DIRECTORY", "CACHE_ROOT_DIRECTORY"):
        assert env[key].startswith(str(tmp_path / "store"))
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_HOME"] == str(tmp_path / "hf")
    assert env["TELEMETRY_DISABLED"] == "1"
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"  # not fetched from GitHub
    assert env["COGNEE_SKIP_CONNECTION_TEST"] == "true"  # 30 s < the model server's start
    assert env["ENABLE_BACKEND_ACCESS_CONTROL"] == "false"  # one store, not one per dataset
    # Cognee loads the tokenizer of the repo it is told the embedding model is
    assert env["EMBEDDING_MODEL"] == "sentence-transformers/all-MiniLM-L6-v2"


def test_its_directories_are_absolute_whatever_the_store_path(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the workflow names stores relative to its directory
    env = worker_environment(Path("results/store"), Path("hf"), ENDPOINT)
    assert env["DATA_ROOT_DIRECTORY"] == str(tmp_path / "results/store/data")
    assert env["HF_HOME"] == str(tmp_path / "hf")


def test_the_encoders_tokenizer_is_found_offline_as_a_hub_repo(tmp_path, monkeypatch) -> None:
    """What Cognee does (hf_hub_download of tokenizer.json for the embedding model's repo),
    with the hub off, finds the packaged encoder's own tokenizer."""
    from huggingface_hub import constants

    from srb.index.dense import resolve_encoder

    hf_home = tokenizer_cache("minilm", tmp_path / "hf")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    code = (
        "from huggingface_hub import hf_hub_download; "
        "print(hf_hub_download('sentence-transformers/all-MiniLM-L6-v2', 'tokenizer.json'))"
    )
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    found = out.stdout.strip()
    packaged = os.path.join(resolve_encoder("minilm"), "tokenizer.json")
    assert open(found, "rb").read() == open(packaged, "rb").read()


def test_structured_output_makes_cognee_send_its_schema(tmp_path) -> None:
    on = worker_environment(tmp_path, tmp_path, ENDPOINT, {})
    assert on["SRB_COGNEE_SCHEMA_MODEL"] == "hosted_vllm/qwen2.5-coder-0.5b"
    off = worker_environment(tmp_path, tmp_path, ENDPOINT, {"structured_output": False})
    assert "SRB_COGNEE_SCHEMA_MODEL" not in off  # its own prompted-JSON fallback


def test_a_local_encoder_gets_a_repo_name_of_its_own() -> None:
    assert tokenizer_repo("/models/my encoder") == "srb-local/my-encoder"


def test_an_encoder_without_a_tokenizer_is_named(tmp_path) -> None:
    (tmp_path / "enc").mkdir()
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        tokenizer_cache(str(tmp_path / "enc"), tmp_path / "hf")


def test_nodes_and_connections_read_as_in_cognees_graph_context() -> None:
    """resolve_edges_to_text's rendering (cognee 1.6.5): a node with text is titled by its
    first 7 words and its 3 most frequent non-stop words."""
    text = "Salt reduction lowered blood pressure; salt intake fell and blood pressure fell."
    assert node_title(text, {"and"}) == (
        "Salt reduction lowered blood pressure; salt intake... [salt, blood, pressure]"
    )
    assert render_node({"name": "salt", "description": "sodium chloride"}, set()) == (
        "Node: salt\n__node_content_start__\nsodium chloride\n__node_content_end__\n"
    )
    assert render_edge("salt", "blood pressure", {"relationship_name": "lowers"}) == (
        "salt --[lowers]--> blood pressure"
    )
    assert render_edge("a", "b", {"relationship_name": "r", "edge_text": "a lowers b"}) == (
        "a --[r]--> b  (a lowers b)"
    )


#: a store of two papers as the worker reports it: documents d1/d2, their chunks, a summary,
#: entities found in one or both papers, and an entity type
GRAPH = {
    "papers": {"d1": "P1", "d2": "P2"},
    "nodes": [
        {"id": "d1", "type": "TextDocument", "text": "Node: text_1\n", "chunk": None},
        {"id": "d2", "type": "TextDocument", "text": "Node: text_2\n", "chunk": None},
        {"id": "c1", "type": "DocumentChunk", "text": "Node: c1\n", "chunk": "chunk one"},
        {"id": "c2", "type": "DocumentChunk", "text": "Node: c2\n", "chunk": "chunk two"},
        {"id": "s1", "type": "TextSummary", "text": "Node: s1\n", "chunk": None},
        {"id": "salt", "type": "Entity", "text": "Node: salt\n", "chunk": None},
        {"id": "bp", "type": "Entity", "text": "Node: bp\n", "chunk": None},
        {"id": "measure", "type": "EntityType", "text": "Node: measure\n", "chunk": None},
    ],
    "edges": [
        {"source": "c1", "target": "d1", "relation": "is_part_of", "text": "c1 --[is_part_of]--> d1"},
        {"source": "c2", "target": "d2", "relation": "is_part_of", "text": "c2 --[is_part_of]--> d2"},
        {"source": "s1", "target": "c1", "relation": "made_from", "text": "s1 --[made_from]--> c1"},
        {"source": "c1", "target": "salt", "relation": "contains", "text": "c1 --[contains]--> salt"},
        {"source": "c1", "target": "bp", "relation": "contains", "text": "c1 --[contains]--> bp"},
        {"source": "c2", "target": "bp", "relation": "contains", "text": "c2 --[contains]--> bp"},
        {"source": "salt", "target": "bp", "relation": "lowers", "text": "salt --[lowers]--> bp"},
        {"source": "bp", "target": "measure", "relation": "is_a", "text": "bp --[is_a]--> measure"},
    ],
}  # fmt: skip


def test_every_node_is_attributed_to_the_papers_it_came_from() -> None:
    got = paper_attribution(GRAPH)
    assert got["c1"] == ("P1",) and got["c2"] == ("P2",)
    assert got["s1"] == ("P1",)  # made from P1's chunk
    assert got["salt"] == ("P1",)  # only P1's chunk contains it
    assert got["bp"] == ("P1", "P2")  # both papers' chunks contain it
    assert got["measure"] == ("P1", "P2")  # the type of an entity of both
    # an edge: the papers both its ends share
    assert edge_papers(got, ["salt", "bp"]) == ("P1",)


def test_a_node_no_paper_reaches_belongs_to_the_whole_store() -> None:
    graph = {**GRAPH, "nodes": [*GRAPH["nodes"], {"id": "lone", "text": "Node: lone\n"}]}
    assert paper_attribution(graph)["lone"] == ("P1", "P2")


def test_search_results_are_items_of_the_export() -> None:
    exported = {i.item_id: i for i in export_items(GRAPH)}
    assert sum(i.kind == "chunk" for i in exported.values()) == 2
    assert sum(i.kind == "edge" for i in exported.values()) == len(GRAPH["edges"])
    attribution = paper_attribution(GRAPH)
    chunks = search_items([{"nodes": ["c2"], "score": 0.9, "text": "chunk two"}], "chunk",
                          attribution)  # fmt: skip
    graph = search_items(
        [{"nodes": ["salt"], "text": "Node: salt\n"},
         {"nodes": ["salt", "bp"], "text": "salt --[lowers]--> bp"}], "graph", attribution
    )  # fmt: skip
    for item in [*chunks, *graph]:
        assert item.item_id in exported
        assert exported[item.item_id].text == item.text
    assert chunks[0].paper_ids == ("P2",) and graph[1].paper_ids == ("P1",)
    assert item_id("chunk", ("P2",), "chunk two") == chunks[0].item_id


def test_the_worker_answers_in_json_lines_and_keeps_library_prints_off_the_protocol() -> None:
    """The protocol only (stdlib; no Cognee needed): an unknown op and a failing op come back
    as errors with their traceback, and a print inside an op goes to stderr."""
    script = (
        "import sys, runpy\n"
        f"ns = runpy.run_path({str(WORKER)!r})\n"
        "async def shout():\n    print('library chatter')\n    return 7\n"
        "async def boom():\n    raise ValueError('bad paper')\n"
        "ns['OPS']['shout'] = shout\nns['OPS']['boom'] = boom\nns['serve']()\n"
    )
    requests = "".join(json.dumps(r) + "\n" for r in
                       [{"op": "shout"}, {"op": "boom"}, {"op": "nope"}])  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", script], input=requests, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert answers[0] == {"ok": True, "result": 7}
    assert answers[1]["ok"] is False and "ValueError: bad paper" in answers[1]["error"]
    assert "in boom" in answers[1]["traceback"]  # where it was raised
    assert answers[2]["ok"] is False and "nope" in answers[2]["error"]
    assert "library chatter" in proc.stderr


def test_without_its_environment_the_error_names_the_rule() -> None:
    system = CogneeSystem()
    with pytest.raises(ConfigError, match="rule system_env"):
        system.check_installed()


def test_graph_completion_is_answered_by_cognee_and_chunks_by_the_shared_synthesizer() -> None:
    system = get_store_system("cognee")
    assert system.modalities == ("chunks", "graph_completion")
    assert system.answers_itself("graph_completion") and not system.answers_itself("chunks")
    assert system.own_environment and not system.concurrent_papers


def test_its_answer_schemas_get_tighter_bounds_than_the_endpoints_defaults() -> None:
    system = CogneeSystem().configure({})
    assert system.schema_bounds() == (6, 120)
    assert CogneeSystem().configure({"cognee": {"max_items": 4}}).schema_bounds() == (4, 120)
    assert CogneeSystem().configure({"structured_output": False}).schema_bounds() is False
