from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/corpus.smk"
include: "rules/ingest.smk"
include: "rules/store.smk"
include: "rules/doctor.smk"
include: "rules/retrieve.smk"
include: "rules/diagnostics.smk"
include: "rules/models.smk"
include: "rules/synthesize.smk"
include: "rules/judge.smk"
include: "rules/analysis.smk"
include: "rules/sequential.smk"
include: "rules/anchor.smk"


rule all:
    default_target: True
    input:
        get_final_output(),
