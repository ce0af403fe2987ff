"""Theoria, the paper's three-layer scientific memory (evidence, communities, theories), and
Prism, its ablation (evidence + one RAPTOR tree + links, answering by internal synthesis).

The paper gives the design (../shared/notes/paper-spec.md, section B) but not every constant;
each choice it leaves open is a field of `TheoriaOptions` (config `memory.theoria`), with why.
Modules: options (the choices), models (chat and embeddings through the caching endpoint),
extract (five aspect passes per chunk), db (the SQLite store), links, raptor, communities,
theories, retrieve (the /retrieve algorithm), build (bulk ingest and incremental observe),
service (the FastAPI app).
"""
