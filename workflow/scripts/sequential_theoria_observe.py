"""Theoria's sequential evaluation, memory side (srb.theoria.sequential.observe_sequentially):
the slice's papers observed batch by batch on a fresh store, with the ingest model only."""

import shutil
from pathlib import Path

from srb.atomic import write_json
from srb.data.canonical import load_canonical
from srb.joblog import job_logging
from srb.priority import join_server_priority
from srb.services import stop_service
from srb.store import endpoint_dense, memory_slice
from srb.systems import get_store_system
from srb.theoria.db import TheoriaDB
from srb.theoria.sequential import observe_sequentially

wc, p, inp, out = snakemake.wildcards, snakemake.params, snakemake.input, snakemake.output
dense = endpoint_dense(p.dense, snakemake.config)
with job_logging(snakemake.log[0], f"sequential_theoria_observe[{wc.corpus}]"):
    if snakemake.config["memory"].get("ingest_at_server_priority", False):
        join_server_priority()
    papers, questions = memory_slice(load_canonical(Path(inp.questions).parent), p.memory["papers"])
    seq = p.memory.get("sequential") or {}
    system = get_store_system("theoria").configure(p.memory)
    system.check_installed()
    system.services = {"llm": dict(p.llm), "dense": dense}
    store = Path(out.store)
    shutil.rmtree(store, ignore_errors=True)
    TheoriaDB(store).close()  # a fresh, empty store: everything arrives through /observe
    _, key = system.service_settings(store, read_only=False)
    try:
        observed = observe_sequentially(
            system.service_url(store, read_only=False),
            system.service_url(Path(inp.bulk_store)),
            papers,
            questions,
            int(seq.get("k") or system.native_knob),
            int(seq.get("batch_size", 1)),
            int(seq.get("seed", 0)),
        )
    finally:
        stop_service(Path(p.llm["servers_dir"]), key)
    write_json(out.observed, observed)
