"""Cognee's side of srb's Cognee adapter: run by the Python of Cognee's own venv.

Cognee is a library, and its pins cannot share the project's environment (envs/cognee.txt), so
srb.systems.cognee starts this file as a subprocess of the venv's interpreter and talks to it in
JSON lines: one request `{"op": ..., "args": {...}}` per stdin line, one answer `{"ok": true,
"result": ...}` or `{"ok": false, "error": ..., "traceback": ...}` per line on the protocol
stream. Anything the library prints goes to stderr (the job's log), never onto the protocol.

It imports the standard library and Cognee only (it cannot import srb). Every setting (where the
store lives, the caching endpoint, the offline workarounds) arrives in the environment, set by
srb.systems.cognee.worker_environment before Cognee is imported.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

DATASET = "srb"
PAPERS_FILE = "srb-papers.json"  # Cognee data id -> paper id, in the store directory


def _store() -> Path:
    return Path(os.environ["SRB_COGNEE_STORE"])


def _papers() -> dict[str, str]:
    path = _store() / PAPERS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def _save_papers(papers: dict[str, str]) -> None:
    path = _store() / PAPERS_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(papers, indent=1, sort_keys=True))
    os.replace(tmp, path)


async def _dataset_id() -> Any:
    import cognee

    for ds in await cognee.datasets.list_datasets():
        if ds.name == DATASET:
            return ds.id
    return None


async def _data_ids() -> set[str]:
    import cognee

    ds = await _dataset_id()
    if ds is None:
        return set()
    return {str(d.id) for d in await cognee.datasets.list_data(ds)}


async def op_setup() -> dict[str, Any]:
    """Cognee's databases (created on first use) and what it resolved offline."""
    import cognee
    from cognee.infrastructure.llm.utils import get_max_chunk_tokens
    from cognee.modules.engine.operations.setup import setup

    if os.environ.get("SRB_COGNEE_SCHEMA_MODEL"):
        # vLLM enforces a JSON schema; litellm's capability table does not know a local
        # model, so Cognee would put the schema in the prompt and ask for any JSON object
        import litellm

        litellm.register_model({os.environ["SRB_COGNEE_SCHEMA_MODEL"]: {
            "litellm_provider": "hosted_vllm", "mode": "chat", "supports_response_schema": True,
        }})  # fmt: skip
    await setup()
    return {"version": cognee.__version__, "max_chunk_tokens": await get_max_chunk_tokens()}


async def op_ingest(paper_id: str, text: str) -> dict[str, Any]:
    """Add one paper to the dataset and cognify it (chunks, graph, summaries)."""
    import cognee

    before = await _data_ids()
    await cognee.add(text, dataset_name=DATASET)
    new = sorted((await _data_ids()) - before)
    papers = _papers()
    for data_id in new:
        papers[data_id] = paper_id
    _save_papers(papers)
    await cognee.cognify(datasets=[DATASET])
    return {"data_ids": new}


async def op_forget(paper_id: str) -> dict[str, Any]:
    """Delete what a failed attempt at a paper left (its data item, chunks and graph)."""
    import cognee

    papers = _papers()
    gone = [d for d, p in papers.items() if p == paper_id]
    ds = await _dataset_id()
    present = await _data_ids()
    for data_id in gone:
        if ds is not None and data_id in present:
            from uuid import UUID

            await cognee.datasets.delete_data(ds, UUID(data_id))
        papers.pop(data_id, None)
    _save_papers(papers)
    return {"deleted": gone}


STOP_WORDS_CACHE: set[str] | None = None


def _stop_words() -> set[str]:
    global STOP_WORDS_CACHE
    if STOP_WORDS_CACHE is None:
        from cognee.modules.retrieval.utils.stop_words import DEFAULT_STOP_WORDS

        STOP_WORDS_CACHE = set(DEFAULT_STOP_WORDS)
    return STOP_WORDS_CACHE


def node_title(text: str, stop_words: set[str]) -> str:
    """Cognee's title for a node with text (resolve_edges_to_text._create_title_from_text):
    its first 7 words and its 3 most frequent non-stop words."""
    import string
    from collections import Counter

    words = [w.lower().strip(string.punctuation) for w in text.split()]
    words = [w for w in words if w and w not in stop_words]
    top = ", ".join(w for w, _ in Counter(words).most_common(3))
    return f"{' '.join(text.split()[:7])}... [{top}]"


def render_node(attrs: dict[str, Any], stop_words: set[str]) -> str:
    """A node as Cognee's graph context shows it (name, then its content)."""
    text = attrs.get("text")
    if text:
        name, content = node_title(text, stop_words), text
    else:
        name = attrs.get("name", "Unnamed Node")
        content = attrs.get("description", name)
    return f"Node: {name}\n__node_content_start__\n{content}\n__node_content_end__\n"


def node_name(attrs: dict[str, Any], stop_words: set[str]) -> str:
    text = attrs.get("text")
    return node_title(text, stop_words) if text else attrs.get("name", "Unnamed Node")


def render_edge(source: str, target: str, attrs: dict[str, Any]) -> str:
    """A connection line as Cognee's graph context shows it (without its fact-status label)."""
    label = (
        attrs.get("relationship_type") or attrs.get("relationship_name") or attrs.get("edge_text")
    )
    line = f"{source} --[{label}]--> {target}"
    description = attrs.get("edge_text")
    if description and description != label:
        line += f"  ({description})"
    return line


def _node_attrs(props: dict[str, Any]) -> dict[str, Any]:
    return {
        k: props[k] for k in ("text", "name", "description", "type") if props.get(k) is not None
    }


async def op_graph() -> dict[str, Any]:
    """Everything the store holds, as the items a search can return: each node rendered as
    the graph context renders it, each edge as its connection line, each chunk's text; with
    the structure (node types, edges) srb attributes items to papers from."""
    from cognee.infrastructure.databases.graph import get_graph_engine

    stop = _stop_words()
    engine = await get_graph_engine()
    nodes, edges = await engine.get_graph_data()
    attrs = {str(n[0]): _node_attrs(n[1]) for n in nodes}
    out_nodes = [
        {"id": nid, "type": a.get("type"), "text": render_node(a, stop), "chunk": a.get("text")
         if a.get("type") == "DocumentChunk" else None}
        for nid, a in attrs.items()
    ]  # fmt: skip
    out_edges = []
    for source, target, relation, props in edges:
        a = {"relationship_name": relation, **(props or {})}
        out_edges.append({
            "source": str(source), "target": str(target), "relation": relation,
            "text": render_edge(node_name(attrs.get(str(source), {}), stop),
                                node_name(attrs.get(str(target), {}), stop), a),
        })  # fmt: skip
    return {"nodes": out_nodes, "edges": out_edges, "papers": _papers()}


async def op_chunks(query: str, top_k: int) -> list[dict[str, Any]]:
    """Cognee's CHUNKS search (its vector search over DocumentChunk text)."""
    from cognee.modules.retrieval.chunks_retriever import ChunksRetriever

    found = await ChunksRetriever(top_k=top_k).get_retrieved_objects(query)
    return [{"nodes": [str(r.id)], "score": float(r.score), "text": r.payload.get("text")}
            for r in found]  # fmt: skip


async def op_triplets(query: str, top_k: int) -> list[dict[str, Any]]:
    """The context of Cognee's GRAPH_COMPLETION, item by item: the triplets its retriever
    finds, rendered as its resolve_edges_to_text does (every node once, then the connections)."""
    from cognee.modules.retrieval.graph_completion_retriever import GraphCompletionRetriever

    stop = _stop_words()
    edges = await GraphCompletionRetriever(top_k=top_k).get_retrieved_objects(query)
    seen: dict[str, dict[str, Any]] = {}
    for edge in edges:
        for node in (edge.node1, edge.node2):
            seen.setdefault(str(node.id), _node_attrs(node.attributes))
    out = [{"nodes": [nid], "text": render_node(a, stop)} for nid, a in seen.items()]
    for edge in edges:
        line = render_edge(
            node_name(seen[str(edge.node1.id)], stop),
            node_name(seen[str(edge.node2.id)], stop),
            edge.attributes or {},
        )
        out.append({"nodes": [str(edge.node1.id), str(edge.node2.id)], "text": line})
    return out


OPS: dict[str, Callable[..., Awaitable[Any]]] = {
    "setup": op_setup,
    "ingest": op_ingest,
    "forget": op_forget,
    "graph": op_graph,
    "chunks": op_chunks,
    "triplets": op_triplets,
}


def serve() -> None:
    # run as a script, this file's directory (srb/systems, which holds srb's cognee.py) leads
    # sys.path: without it, `import cognee` is the library
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the library's prints go to the log
    loop = asyncio.new_event_loop()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            result = loop.run_until_complete(OPS[request["op"]](**request.get("args", {})))
            answer: dict[str, Any] = {"ok": True, "result": result}
        except Exception as error:  # reported to srb, which raises it with this traceback
            answer = {"ok": False, "error": f"{type(error).__name__}: {error}",
                      "traceback": traceback.format_exc()}  # fmt: skip
        protocol.write(json.dumps(answer, default=str) + "\n")
    loop.close()


if __name__ == "__main__":
    serve()
