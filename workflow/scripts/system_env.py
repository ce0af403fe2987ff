"""Build (or reuse) one store system's own environment and check what it needs to run."""

from pathlib import Path

from srb.atomic import write_json
from srb.joblog import job_logging
from srb.system_env import ensure_env
from srb.systems import get_store_system

wc, p, out = snakemake.wildcards, snakemake.params, snakemake.output
with job_logging(snakemake.log[0], f"system_env[{wc.system}]"):
    record = ensure_env(wc.system, Path(snakemake.input.lock), Path(p.venv), Path(snakemake.log[0]))
    get_store_system(wc.system).check_environment(record)
    write_json(out.record, record)
