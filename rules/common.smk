import os
import re
import socket
import sys
import uuid
from pathlib import Path

sys.path.insert(0, workflow.basedir)

# This invocation's id and main pid: jobs inherit them and lease the vLLM servers they use, so
# the onsuccess/onerror hooks stop only servers no other running invocation still holds.
os.environ.setdefault("SRB_RUN_PID", str(os.getpid()))
RUN_ID = os.environ.setdefault(
    "SRB_RUN_ID", f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
)

from srb.analysis import check_analysis_config  # noqa: E402
from srb.config import (  # noqa: E402
    apply_shared_storage,
    check_config,
    check_llm_config,
    validate_schema,
)

# config errors name the file(s) the values came from and the key
CONFIG_SOURCE = (
    " + ".join(str(f) for f in workflow.overwrite_configfiles) or "config/config.yaml"
)
validate_schema(config, workflow.source_path("../config/schema.yaml"), CONFIG_SOURCE)
check_config(config, CONFIG_SOURCE)
apply_shared_storage(config)

CORPORA = config["corpora"]
SYSTEMS = config["systems"]
MODALITIES = config["modalities"]
# memory systems that own their store: each declares its own modalities
MEMORY = config["memory"]
STORE_SYSTEMS = MEMORY["systems"]
from srb.systems import store_registry  # noqa: E402

# the project's envs/, wherever the workflow runs
from srb.systems.store import ENVS_DIR  # noqa: E402

STORE_MODALITIES = {s: list(store_registry()[s].modalities) for s in STORE_SYSTEMS}
# cells answering with the system's own prompt (internal synthesis: Prism, Cognee's
# graph_completion), as "system/modality": native cells only
INTERNAL_PAIRS = [
    (s, m)
    for s in STORE_SYSTEMS
    for m in STORE_MODALITIES[s]
    if store_registry()[s].answers_itself(m)
]
INTERNAL_CELLS = [f"{s}/{m}" for s, m in INTERNAL_PAIRS]
INTERNAL_SYSTEMS = sorted({s for s, _ in INTERNAL_PAIRS})
ALL_SYSTEMS = [*SYSTEMS, *STORE_SYSTEMS]
UNIT_PATTERN = "|".join(map(re.escape, SYSTEMS)) or "(?!)"
STORE_PATTERN = "|".join(map(re.escape, STORE_SYSTEMS)) or "(?!)"
# restore_store: systems with a budgeted modality; restore_store_native: those with an
# internal one (ruleorder picks the native rule for an internal cell of a mixed system)
BUDGETED_STORE_PATTERN = (
    "|".join(
        re.escape(s)
        for s in STORE_SYSTEMS
        if any(f"{s}/{m}" not in INTERNAL_CELLS for m in STORE_MODALITIES[s])
    )
    or "(?!)"
)
NATIVE_STORE_PATTERN = "|".join(map(re.escape, INTERNAL_SYSTEMS)) or "(?!)"
INTERNAL_MODALITY_PATTERN = (
    "|".join(sorted({re.escape(m) for _, m in INTERNAL_PAIRS})) or "(?!)"
)
# store systems whose library runs from a venv of its own (rule system_env)
OWN_ENV_SYSTEMS = [s for s in STORE_SYSTEMS if store_registry()[s].own_environment]
OWN_ENV_PATTERN = "|".join(map(re.escape, OWN_ENV_SYSTEMS)) or "(?!)"
BUDGETS = [str(b) for b in config["budgets"]]
HYBRID_CHANNELS = config["retrieval"]["hybrid_channels"]
# what the rank job writes: every modality, plus the channels a hybrid fuses
RANKED_MODALITIES = [
    *MODALITIES,
    *(c for c in HYBRID_CHANNELS if "hybrid" in MODALITIES and c not in MODALITIES),
]
# Jobs that mostly wait on a model server (store ingest/doctor/restore, synthesis, LLM judging)
# hold no core: with `threads: 0` the retrieval jobs run beside them instead of after them (on 2
# cores four ingests held both job slots for the whole ingest phase). srb/job_threads.py makes
# the OMP_NUM_THREADS=0 Snakemake then exports valid; the `model_clients` resource (a limit in
# profiles/default) bounds how many run at once; profiles/slurm gives each one CPU (set-threads).
# A store's doctor and restores search the store (and embed through the cache), they send no
# prompt to a model server: they hold a `store_searches` slot instead, so they never keep the
# synthesis jobs that feed the server from starting (on 2 cores, with doctors and restores in 5
# of 6 model-client slots, the synthesizer saw one synthesis job at a time).
MODEL_CLIENT_THREADS = 0
# A finished store's doctor, restore and the sequential evaluation start before the synthesis
# and judging of cells already restored: they are the run's critical path after the ingest
# phase (measured on 2 cores: Theoria's dense restore waited 14 min behind synthesis jobs).
MEMORY_CHAIN_PRIORITY = 5
LLM = config.get("llm")
if LLM:
    from srb.llm.models import check_sources_present

    check_llm_config(config, CONFIG_SOURCE)
    SYNTH = LLM["synthesizer"]
    JUDGES = LLM["judges"]
    LLM_MODELS = list(
        dict.fromkeys(
            [
                SYNTH,
                *(j for j in JUDGES if j != "rubric"),
                *([MEMORY["llm"]] if STORE_SYSTEMS else []),
            ]
        )
    )
    check_sources_present(LLM["models"], LLM_MODELS)
    DIRECT_READ_BUDGET = str(LLM["direct_read_budget"])
    PROMPTS = LLM["prompts"]
    ANALYSIS = config["analysis"]
else:
    SYNTH, JUDGES, LLM_MODELS, DIRECT_READ_BUDGET = None, [], [], "0"
    ANALYSIS = None


wildcard_constraints:
    corpus="|".join(map(re.escape, CORPORA)),
    system="|".join([*ALL_SYSTEMS, "base", "direct_read"]),
    modality="|".join(
        dict.fromkeys(
            [*MODALITIES, *(m for ms in STORE_MODALITIES.values() for m in ms), "none"]
        )
    ),
    budget="|".join(map(re.escape, [*BUDGETS, DIRECT_READ_BUDGET])),
    model="|".join(map(re.escape, LLM_MODELS or ["none"])),
    synth="|".join(map(re.escape, [SYNTH or "none"])),
    judge="|".join(map(re.escape, JUDGES or ["none"])),


def corpus_source(wildcards):
    """The configured local source's files, so editing one reruns the import; a missing source
    fails at run time with its path named (a dry run still shows the whole grid)."""
    path = config["corpus_sources"][wildcards.corpus].get("path")
    if not path or not Path(path).exists():
        return []
    if Path(path).is_dir():
        return sorted(str(f) for f in Path(path).rglob("*") if f.is_file())
    return [path]


def system_modalities(system):
    """A store system's own modalities; the configured ones for unit systems."""
    return STORE_MODALITIES.get(system, MODALITIES)


def retrieval_grid(systems=None):
    """(system, modality, budget) of every retrieval cell, expanded per system."""
    return [
        (s, m, b)
        for s in (ALL_SYSTEMS if systems is None else systems)
        for m in system_modalities(s)
        for b in cell_budgets(s, m)
    ]


def cell_budgets(system, modality):
    """Every budget, or the native one only for a cell the system answers by itself."""
    return ["native"] if f"{system}/{modality}" in INTERNAL_CELLS else BUDGETS


def system_budgets(system):
    """The budgets any of the system's modalities restores (the doctor's calibration)."""
    found = {b for m in system_modalities(system) for b in cell_budgets(system, m)}
    return [b for b in BUDGETS if b in found] or ["native"]


def retrieval_cells(corpus):
    return [
        f"results/{corpus}/retrieval/{s}/{m}/{b}.jsonl" for s, m, b in retrieval_grid()
    ]


def store_bm25_index(wildcards, modalities):
    """The BM25 index over a store system's exported items, when a modality fuses it."""
    system = store_registry()[wildcards.system]
    fused = [m for m in modalities if m in getattr(system, "bm25_fused", ())]
    return f"results/{wildcards.corpus}/index/{wildcards.system}/bm25" if fused else []


def system_env(wildcards):
    """The record of the system's own environment, for systems that need one."""
    if wildcards.system in OWN_ENV_SYSTEMS:
        return f"{MEMORY['envs_dir']}/{wildcards.system}.json"
    return []


def ingest_after(wildcards):
    """What must finish before a store system's ingest starts.

    Store systems whose requests it sends (Prism sends Theoria's extraction requests): it then
    gets them from the call cache, instead of both sending them to the model at once.

    The unit systems' dense indexes (config `memory.ingest_after_indexes`): once the ingest
    model's server is busy it holds the cores, and the workflow's own jobs yield to it
    (srb/priority.py), so an encoder job started beside the ingests only runs in its gaps.
    Measured on 2 cores (stop 32's cold run): Simple RAG's dense index, 137 s of CPU, took
    22 min beside the ingests and held a job slot all that time, so every 2-thread BM25 index
    waited behind it and the whole Simple RAG chain started 11 min after the ingest phase.
    Run first, the indexes cost their CPU time once, at full speed.
    """
    system = store_registry()[wildcards.system]
    after = [
        f"results/{wildcards.corpus}/units/{s}.ingest.json"
        for s in getattr(system, "reuses_requests_of", ())
        if s in STORE_SYSTEMS
    ]
    if MEMORY.get("ingest_after_indexes", True) and channel_used("dense"):
        after += [f"results/{wildcards.corpus}/index/{s}/dense" for s in SYSTEMS]
    return after


def after_ingest_phase(wildcards):
    """A unit system's BM25 index and doctor (and so its whole retrieval chain) wait until the
    ingest model's phase has ended, when its ingests wait on the dense indexes (see
    ingest_after). Beside the ingest model's server a job that computes gets almost no CPU
    (srb/priority.py) and holds its core slot for minutes, and Snakemake selects no job at
    all while no core slot is free, not even one that holds none: on 2 cores (stop 38) Simple
    RAG's 2-thread BM25 index sat 7.7 min beside the server and Prism and the sequential
    observer, next on the ingest phase's critical path, started 2.2 min after Theoria's
    ingest. After the phase the chain runs at full speed while the synthesizer's server
    starts. The marker is ancient, as for the synthesis jobs (after_memory_llm)."""
    if wildcards.system in STORE_SYSTEMS or not MEMORY.get(
        "ingest_after_indexes", True
    ):
        return []
    if not (LLM and LLM["one_server_at_a_time"] and STORE_SYSTEMS):
        return []
    return ancient(f"results/llm_phases/{MEMORY['llm']}.done.json")


def dense_index_priority(wildcards):
    """Right after the ingest model (30) when the ingests wait on the dense indexes, so they
    start as early as the indexes allow; the units jobs too, as Snakemake does not pass a
    job's priority on to the jobs it waits for (stop 33: Simple RAG's units, at priority 0,
    were built after the synthesizer was prepared, and the ingests started 1.4 min later).
    """
    return 25 if STORE_SYSTEMS and MEMORY.get("ingest_after_indexes", True) else 0


def ingest_priority(wildcards):
    """The run's critical path starts first. A system that ingests its papers one after
    another (Graphiti) is one long chain of dependent calls, each waiting its turn in the
    server's batch, so it starts before all others; then the ingests that other model-bound
    jobs wait on (Prism reuses Theoria's requests; the sequential evaluation follows Theoria).
    Measured on 2 cores: started after Mem0, Graphiti's 9 calls ended the ingest phase 17 min
    in; Theoria alone finished in 7.5.
    """
    system = store_registry()[wildcards.system]
    waiting = [
        s
        for s in STORE_SYSTEMS
        if wildcards.system in getattr(store_registry()[s], "reuses_requests_of", ())
    ]
    if wildcards.system == "theoria" and MEMORY.get("sequential", {}).get("enabled"):
        waiting.append("sequential")
    return 10 + len(waiting) + (0 if system.concurrent_papers else 5)


def model_priority(wildcards):
    """The memory systems' ingest model is prepared first, before the own-env builds (priority
    20) that only two systems wait on: every ingest waits on it (with two threads it waited
    4.7 min on 2 cores for both to be free of the retrieval jobs; at priority 20, 2.0 min
    behind the two builds).

    The other models (synthesizer, judges) next, before the dense indexes the ingests wait on
    (25): prepared as the ingests started, the synthesizer's 15 s of CPU took 14.3 min beside
    the ingest model's server (stop 38), and a job holding a core slot that long stops
    Snakemake from starting even the jobs that hold none once the other slot is taken too (it
    selects nothing while no core is free): Prism and the sequential observer, on the ingest
    phase's critical path, then waited 1.75 min behind a starved BM25 index."""
    if not STORE_SYSTEMS:
        return 0
    return 30 if wildcards.model == MEMORY.get("llm") else 26


def memory_params(*extra):
    """The part of `memory` config a store job depends on: what changes the store or its
    calls (not the list of systems, nor how many papers run at once)."""
    keep = [
        "papers",
        "llm",
        "retries",
        "structured_output",
        "max_completion_tokens",
        "max_whitespace_run",
        "theoria",
        "hindsight",
        "mem0",
        "cognee",
        *extra,
    ]
    return {k: MEMORY.get(k) for k in keep}


def encoder_params():
    """What the endpoint's embeddings depend on: the encoder and its cache."""
    return {"encoder": config["dense"]["encoder"], "cache": config["dense"]["cache"]}


def memory_llm_params(wildcards):
    """The `llm` config the store jobs depend on: the ingest model and the call cache."""
    keep = ["backend", "cache", "models_dir", "servers_dir", "concurrency", "seed"]
    out = {k: LLM[k] for k in keep}
    out["models"] = {MEMORY["llm"]: LLM["models"][MEMORY["llm"]]}
    return out


def memory_llm_jobs(wildcards):
    """Outputs of every job that sends requests to the memory systems' ingest model."""
    files = [
        f"results/{corpus}/units/{system}.ingest.json"
        for corpus in CORPORA
        for system in STORE_SYSTEMS
    ]
    if (
        "theoria" in STORE_SYSTEMS
        and MEMORY.get("sequential", {}).get("enabled")
        and LLM
    ):
        files += [f"results/{c}/sequential/theoria/observed.json" for c in CORPORA]
    return files


def after_memory_llm(wildcards):
    """With `llm.one_server_at_a_time`, a synthesis or judge job waits until the memory
    systems' ingest model has finished and its server is stopped (rules/models.smk). The
    marker is ancient: a later rerun of that phase alone never reruns the answers."""
    own = {SYNTH, *JUDGES}
    if not (LLM["one_server_at_a_time"] and STORE_SYSTEMS) or MEMORY["llm"] in own:
        return []
    return ancient(f"results/llm_phases/{MEMORY['llm']}.done.json")


def budget_verdict_files(corpus):
    """The budget verdict beside every retrieval cell (in the order of retrieval_cells)."""
    return [f.removesuffix(".jsonl") + ".budget.json" for f in retrieval_cells(corpus)]


def channel_used(channel):
    """Whether any configured modality of the unit systems searches `channel`."""
    return channel in MODALITIES or (
        "hybrid" in MODALITIES and channel in HYBRID_CHANNELS
    )


def channel_index(wildcards, channel):
    """The channel's index when any configured modality searches it (the doctor probes it)."""
    return (
        f"results/{wildcards.corpus}/index/{wildcards.system}/{channel}"
        if channel_used(channel)
        else []
    )


def doctor_settings(wildcards):
    return {
        "probes": config["doctor"]["probes"],
        "modalities": MODALITIES,
        "hybrid_channels": HYBRID_CHANNELS,
        "budgets": BUDGETS,
        "mode": config["budget_mode"],
        "tolerance": config["budget_tolerance"],
        "rrf_k": config["retrieval"]["rrf_k"],
        "depth": config["retrieval"]["depth"],
        "bm25": {"k1": config["bm25"]["k1"], "b": config["bm25"]["b"]},
        "dense": config["dense"],
    }


def file_hash(*paths):
    """Short content hash of prompt templates: editing one reruns exactly the jobs that use it."""
    import hashlib

    digest = hashlib.sha256()
    for p in paths:
        digest.update(Path(p).read_bytes())
    return digest.hexdigest()[:16]


def llm_params(model, role, system=None, modality=None):
    """The part of `llm` config a job depends on: its own model and templates only, so editing
    a judge's settings never reruns synthesis (and vice versa). A system with internal
    synthesis answers with its own prompt (`llm.prompts.<system>`)."""
    if model == "rubric":
        return {"judge_rubric": True}
    keep = ["backend", "cache", "models_dir", "servers_dir", "concurrency", "seed"]
    if role == "synthesize":
        keep += ["questions", "max_answer_tokens"]
        prompts = ["synthesize", "synthesize_base"]
    else:
        keep += ["judge_retries", "judge_max_tokens", "judge_context_chars"]
        prompts = ["judge"]
    out = {k: LLM[k] for k in keep}
    out["prompts"] = {k: LLM["prompts"][k] for k in prompts}
    if role == "synthesize" and f"{system}/{modality}" in INTERNAL_CELLS:
        out["prompts"]["synthesize"] = system_prompt(system)
    out["models"] = {model: LLM["models"][model]}
    return out


def system_prompt(system):
    """The answer prompt of a system with internal synthesis."""
    if system not in LLM["prompts"]:
        raise ValueError(
            f"{system} answers by internal synthesis: set llm.prompts.{system} to its prompt"
        )
    return LLM["prompts"][system]


def synthesis_templates(wildcards):
    first = (
        system_prompt(wildcards.system)
        if f"{wildcards.system}/{wildcards.modality}" in INTERNAL_CELLS
        else PROMPTS["synthesize"]
    )
    return [first, PROMPTS["synthesize_base"]]


def llm_cells():
    """(system, modality, budget) of every cell that is synthesized and judged: a unit
    system's in `llm.modalities` (null = all), a store system's in its own."""
    synthesized = LLM.get("modalities") or MODALITIES
    cells = [
        (s, m, b)
        for s, m, b in retrieval_grid(LLM["systems"])
        if s in STORE_MODALITIES or m in synthesized
    ]
    if "base" in LLM["llm_only"]:
        cells.append(("base", "none", "native"))
    if "direct_read" in LLM["llm_only"]:
        cells.append(("direct_read", "none", DIRECT_READ_BUDGET))
    return cells


if LLM:
    _resolved = check_analysis_config(ANALYSIS, llm_cells())
    ROUTER_SYSTEMS = _resolved["router_systems"]
    QUALITATIVE_SYSTEM = _resolved["qualitative_system"]


def judged_cells(judge):
    """The cells `judge` scores: the rubric judge every cell; an LLM judge every cell, or with
    `llm.judge_scope: native` the native cells and base/direct_read only, and of those only
    the cells of `llm.judge_systems` when set (its analyses then cover those cells and say so).
    """
    if judge == "rubric":
        return llm_cells()
    cells = llm_cells()
    if LLM.get("judge_scope", "all") == "native":
        cells = [
            c for c in cells if c[2] == "native" or c[0] in ("base", "direct_read")
        ]
    if LLM.get("judge_systems") is not None:
        cells = [c for c in cells if c[0] in LLM["judge_systems"]]
    return cells


def judged_subset(judge):
    """How `judge`'s cells are a subset of the synthesized ones, for its tables' titles ("" for
    every cell)."""
    if len(judged_cells(judge)) == len(llm_cells()):
        return ""
    limits = []
    if LLM.get("judge_scope", "all") == "native":
        limits.append("native cells and base/direct_read: llm.judge_scope")
    if LLM.get("judge_systems") is not None:
        limits.append(f"systems {', '.join(LLM['judge_systems'])}: llm.judge_systems")
    return "; ".join(limits)


def judged_budgets(judge):
    return [b for b in BUDGETS if any(c[2] == b for c in judged_cells(judge))]


def judgment_files(wildcards):
    return [
        f"results/{wildcards.corpus}/judgments/{wildcards.synth}/{wildcards.judge}/{s}/{m}/{b}.jsonl"
        for s, m, b in judged_cells(wildcards.judge)
    ]


def cell_context_files(wildcards):
    return [
        f"results/{wildcards.corpus}/retrieval/{s}/{m}/{b}.jsonl"
        for s, m, b in judged_cells(wildcards.judge)
    ]


def all_judgment_files(wildcards):
    """Every judge's judgments of its cells, judge-major (calibration compares judges)."""
    return [
        f"results/{wildcards.corpus}/judgments/{wildcards.synth}/{judge}/{s}/{m}/{b}.jsonl"
        for judge in JUDGES
        for s, m, b in judged_cells(judge)
    ]


def answer_files(wildcards):
    return [
        f"results/{wildcards.corpus}/answers/{wildcards.synth}/{s}/{m}/{b}.jsonl"
        for s, m, b in judged_cells(wildcards.judge)
    ]


def model_card(name):
    """The prepared model's card, for models built from packaged weights; nothing otherwise."""
    source = LLM["models"][name]["source"]
    if "served_name" in source:  # a hosted endpoint: nothing to prepare
        return []
    return f"{LLM['models_dir']}/{name}.card.json"


def get_final_output():
    targets = expand(
        "results/{corpus}/diagnostics/retrieval.{ext}",
        corpus=CORPORA,
        ext=["csv", "md"],
    )
    if LLM:
        targets += expand(
            "results/{corpus}/leaderboard/{synth}/{judge}.{ext}",
            corpus=CORPORA,
            synth=SYNTH,
            judge=JUDGES,
            ext=["csv", "md", "png"],
        )
        targets += expand(
            [
                "results/{corpus}/stats/{synth}/{judge}/bootstrap.csv",
                "results/{corpus}/stats/{synth}/{judge}/router.csv",
                "results/{corpus}/stats/{synth}/{judge}/tiers.png",
                "results/{corpus}/stats/{synth}/{judge}/human_agreement.csv",
                "results/{corpus}/stats/{synth}/calibration.csv",
                "results/{corpus}/qualitative/{synth}/{judge}.md",
            ],
            corpus=CORPORA,
            synth=SYNTH,
            judge=JUDGES,
        )
    targets += expand(
        "results/{corpus}/doctor/{system}.json", corpus=CORPORA, system=ALL_SYSTEMS
    )
    if (
        LLM
        and "theoria" in STORE_SYSTEMS
        and MEMORY.get("sequential", {}).get("enabled")
    ):
        targets += expand(
            "results/{corpus}/sequential/theoria/{synth}.{ext}",
            corpus=CORPORA,
            synth=SYNTH,
            ext=["csv", "png"],
        )
    if STORE_SYSTEMS:
        targets += expand(
            "results/{corpus}/diagnostics/ingest_cost.{ext}",
            corpus=CORPORA,
            ext=["csv", "md"],
        )
    return targets


onsuccess:
    if LLM:
        from srb.llm.server import stop_servers

        stop_servers(LLM["servers_dir"], RUN_ID)


onerror:
    if LLM:
        from srb.llm.server import stop_servers

        stop_servers(LLM["servers_dir"], RUN_ID)
