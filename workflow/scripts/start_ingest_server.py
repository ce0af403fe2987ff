"""Start the memory systems' ingest model's server ahead of the ingests, on a cold call cache."""

from srb.atomic import write_json
from srb.joblog import job_logging
from srb.llm.prestart import prestart_server

with job_logging(snakemake.log[0], f"start_ingest_server[{snakemake.wildcards.model}]") as log:
    decision = prestart_server(snakemake.params.llm, snakemake.wildcards.model)
    log.info("%s", decision["why"])
    write_json(snakemake.output.started, decision)
