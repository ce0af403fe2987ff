"""End one model's phase of the run: stop its vLLM server, record what the phase waited for."""

import os

from srb.atomic import write_json
from srb.joblog import job_logging
from srb.llm.server import stop_servers
from srb.services import RUN_ID_ENV

with job_logging(snakemake.log[0], f"end_llm_phase[{snakemake.wildcards.model}]") as log:
    model = snakemake.wildcards.model
    stopped = stop_servers(
        snakemake.params.servers_dir, os.environ.get(RUN_ID_ENV), match={"model": model}
    )
    log.info(
        "%s: %d server(s) stopped after %d job(s) of its phase",
        model,
        stopped,
        len(snakemake.input),
    )
    write_json(snakemake.output.done, {"model": model, "after": sorted(snakemake.input)})
