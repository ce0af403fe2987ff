import re
import sys
from pathlib import Path

from snakemake.utils import validate

sys.path.insert(0, workflow.basedir)

from srb.config import check_config  # noqa: E402

validate(config, workflow.source_path("../config/schema.yaml"))
check_config(config)

CORPORA = config["corpora"]
SYSTEMS = config["systems"]
MODALITIES = config["modalities"]
BUDGETS = [str(b) for b in config["budgets"]]


wildcard_constraints:
    corpus="|".join(map(re.escape, CORPORA)),
    system="|".join(SYSTEMS),
    modality="|".join(MODALITIES),
    budget="|".join(BUDGETS),


def corpus_source(wildcards):
    """The configured local source's files, so editing one reruns the import; a missing source
    fails at run time with its path named (a dry run still shows the whole grid)."""
    path = config["corpus_sources"][wildcards.corpus].get("path")
    if not path or not Path(path).exists():
        return []
    if Path(path).is_dir():
        return sorted(str(f) for f in Path(path).rglob("*") if f.is_file())
    return [path]


def native_cell(wildcards):
    if wildcards.budget == "native" or config["budget_mode"] != "calibrated":
        return []
    return f"results/{wildcards.corpus}/retrieval/{wildcards.system}/{wildcards.modality}/native.jsonl"


def retrieval_cells(corpus):
    return expand(
        "results/{corpus}/retrieval/{system}/{modality}/{budget}.jsonl",
        corpus=corpus,
        system=SYSTEMS,
        modality=MODALITIES,
        budget=BUDGETS,
    )


def get_final_output():
    return expand(
        "results/{corpus}/diagnostics/retrieval.{ext}",
        corpus=CORPORA,
        ext=["csv", "md"],
    )
