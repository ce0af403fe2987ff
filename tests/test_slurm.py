"""Cluster submission on a real SLURM scheduler: a private single-node cluster (munge, MariaDB,
slurmdbd, slurmctld, slurmd from Debian's packages, every file under one temp directory, see
tests/slurm/start.sh) runs a reduced grid through `snakemake --profile profiles/slurm` and
snakemake-executor-plugin-slurm. `sacct` must show every job of the DAG as a SLURM job with the
CPUs, memory and time limit the rule declared (as the profile resolves them), and the outputs
must equal a local run's byte for byte. The test stops the daemons it started, and only those.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from test_workflow import (
    REPO,
    SNAKEMAKE,
    read_jsonl,
    snakemake,
    write_config,
    write_tiny_corpus,
)

from srb.paper_cost import parse_dry_run

pytestmark = pytest.mark.integration

SLURM_DIR = Path(__file__).resolve().parent / "slurm"
PACKAGES = ["slurmctld", "slurmd", "slurm-client", "slurmdbd", "munge", "mariadb-server"]
BINARIES = ["munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd", "sbatch", "sacct", "srun"]
#: the site settings a user edits in profiles/slurm, given for this cluster on the command line
SITE = ["slurm_partition=debug", "slurm_account=root"]


def ensure_slurm_installed() -> None:
    """Debian's SLURM packages, installed when missing (root and the apt registry needed)."""
    if all(shutil.which(b) for b in BINARIES):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.fail(f"the SLURM test needs {', '.join(PACKAGES)} (apt-get install, as root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES],
    ):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    missing = [b for b in BINARIES if not shutil.which(b)]
    assert not missing, f"installed {PACKAGES} but {missing} are still not on PATH"


@pytest.fixture(scope="module")
def cluster():
    ensure_slurm_installed()
    # munged wants every directory above its socket world-searchable: pytest's are 0700
    holder = Path(tempfile.mkdtemp(prefix="srb-slurm-"))
    holder.chmod(0o755)
    base = holder / "cluster"
    env = {**os.environ, "USER": os.environ.get("USER") or "root"}
    started = subprocess.run(
        [str(SLURM_DIR / "start.sh"), str(base)], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    try:
        assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
        yield {**env, "SLURM_CONF": str(base / "etc/slurm.conf")}
    finally:
        subprocess.run([str(SLURM_DIR / "stop.sh"), str(base), "--purge"], env=env,
                       capture_output=True, timeout=120)  # fmt: skip
        shutil.rmtree(holder, ignore_errors=True)
        left = [
            line
            for line in subprocess.run(
                ["ps", "-eo", "pid,args"], capture_output=True, text=True
            ).stdout.splitlines()  # fmt: skip
            if str(base) in line
        ]
        assert not left, f"daemons of the test cluster left running: {left}"


def _declared_jobs(dry_run: str) -> list[tuple[str, int, int, int]]:
    """(rule, threads, mem_mb, runtime) of every job a dry run lists."""
    jobs = parse_dry_run(dry_run)
    missing = [j.rule for j in jobs if not (j.mem_mb and j.runtime_min)]
    assert not missing, f"no mem_mb/runtime resolved for rule(s) {missing}"
    return [(j.rule, j.threads, j.mem_mb, j.runtime_min) for j in jobs]


def _rule(comment: str) -> str:
    """The rule of a job from the plugin's comment: rule_<rule>[_wildcards_<values>]."""
    return comment.removeprefix("rule_").split("_wildcards_")[0]


def _minutes(limit: str) -> int:
    """sacct Timelimit ([D-]HH:MM:SS) in minutes."""
    days, _, clock = limit.rpartition("-")
    h, m, s = (int(x) for x in clock.split(":"))
    return int(days or 0) * 1440 + h * 60 + m + (1 if s else 0)


def _sacct(env: dict, since: str, expected: int, timeout: float = 120) -> list[list[str]]:
    """Finished jobs since `since`, polled until each record is whole (a just-finished short
    job's record can briefly lack its name and limits)."""
    fmt = "JobIDRaw,JobName,Comment,ReqCPUS,ReqMem,Timelimit,State,ExitCode"
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-S", since, f"--format={fmt}"],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        rows = [line.split("|") for line in out.stdout.splitlines() if line.strip()]
        whole = [r for r in rows if r[2].startswith("rule_") and r[5] and r[6] != "RUNNING"]
        if len(whole) >= expected or time.monotonic() > deadline:
            return rows
        time.sleep(2)


def _outputs(root: Path) -> dict[str, bytes]:
    """Every table, ranking, cell and report under results/, not logs, timings or binary indexes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted((root / "results").rglob("*"))
        if p.is_file()
        and p.suffix in {".jsonl", ".json", ".csv", ".md", ".tsv"}
        and not {"logs", "benchmarks"} & set(p.relative_to(root).parts)
    }


def test_reduced_grid_runs_as_slurm_jobs_with_declared_resources(cluster, tmp_path: Path) -> None:
    corpus = write_tiny_corpus(tmp_path / "data")
    config = write_config(tmp_path, corpus, systems=["simple_rag"], budgets=["native", "2K"])
    local = snakemake(tmp_path / "local", config)
    assert local.returncode == 0, local.stderr[-4000:]

    env = {
        **cluster,
        "OMP_NUM_THREADS": "1",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    submit = [
        *SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(tmp_path / "slurm"), "--configfile", str(config),
        "--profile", str(REPO / "profiles/slurm"), "--jobs", "2",
        "--default-resources", "mem_mb=2000", "runtime=30", *SITE,
        "--latency-wait", "5", "--seconds-between-status-checks", "1",
    ]  # fmt: skip
    dry = subprocess.run([*submit, "-n"], env=env, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr[-4000:]
    declared = _declared_jobs(dry.stdout + dry.stderr)
    assert len(declared) >= 5, dry.stdout[-3000:]

    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))
    run = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=2400)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]

    rows = _sacct(env, since, len(declared))
    jobs = [r for r in rows if r[2].startswith("rule_")]
    assert Counter(_rule(r[2]) for r in jobs) == Counter(d[0] for d in declared)
    assert all(r[6] == "COMPLETED" and r[7] == "0:0" for r in jobs), rows
    resources = Counter((_rule(r[2]), int(r[3]), r[4], _minutes(r[5])) for r in jobs)
    assert resources == Counter((rule, t, f"{mem}M", rt) for rule, t, mem, rt in declared)

    # the profile's shared-storage caches: shards of files, no SQLite on the shared directory
    cache = tmp_path / "slurm" / "cache"
    assert list((cache / "embeddings").glob("*.npz")), sorted(cache.rglob("*"))[:20]
    assert not list(cache.glob("*.sqlite*")), sorted(cache.glob("*.sqlite*"))

    ours, theirs = _outputs(tmp_path / "local"), _outputs(tmp_path / "slurm")
    assert ours and ours.keys() == theirs.keys()
    differing = [k for k in ours if ours[k] != theirs[k]]
    assert not differing, differing


def test_model_clients_share_one_grouped_slurm_job_and_server(cluster, tmp_path: Path) -> None:
    """Synthesis and judging (rules synthesize, judge) run as one SLURM group job, so the
    vLLM server its first job starts answers every cell's questions: one model load, not one
    per cell. The group job books what the profile's `model_clients` lets run at once."""
    from test_llm_workflow import ANALYSIS, llm_config

    corpus = write_tiny_corpus(tmp_path / "data")
    run = tmp_path / "slurm"
    llm = llm_config(run, questions=2)
    config = write_config(tmp_path, corpus, systems=["simple_rag"], modalities=["bm25", "hybrid"],
                          budgets=["native", "2K"], llm=llm, analysis=ANALYSIS)  # fmt: skip
    env = {
        **cluster,
        "OMP_NUM_THREADS": "1",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    submit = [
        *SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(run), "--configfile", str(config),
        "--profile", str(REPO / "profiles/slurm"), "--jobs", "2",
        "--default-resources", "mem_mb=2000", "runtime=30", *SITE,
        "--latency-wait", "5", "--seconds-between-status-checks", "1",
    ]  # fmt: skip
    dry = subprocess.run([*submit, "-n"], env=env, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr[-4000:]
    planned = parse_dry_run(dry.stdout + dry.stderr)
    declared = Counter(j.rule for j in planned)
    client_mem = max(j.mem_mb for j in planned if j.rule in ("synthesize", "judge"))
    assert declared["synthesize"] == 6 and declared["judge"] == 12, declared

    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))
    done = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=2400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]

    others = sum(n for rule, n in declared.items() if rule not in ("synthesize", "judge"))
    rows = _sacct(env, since, others + 1)
    jobs = [r for r in rows if r[2].startswith("rule_")]
    grouped = [r for r in jobs if _rule(r[2]).startswith("model_answers")]
    assert len(grouped) == 1, [r[2] for r in jobs]
    assert not [r for r in jobs if _rule(r[2]) in ("synthesize", "judge")], rows
    assert all(r[6] == "COMPLETED" and r[7] == "0:0" for r in jobs), rows
    # at most model_clients=2 of the 1-CPU clients at once: 2 CPUs and twice a client's memory
    assert (int(grouped[0][3]), grouped[0][4]) == (2, f"{2 * client_mem}M"), grouped

    answers = sorted((run / "results/tiny/answers").rglob("*.jsonl"))
    judgments = sorted((run / "results/tiny/judgments").rglob("*.jsonl"))
    assert (len(answers), len(judgments)) == (declared["synthesize"], declared["judge"])
    assert all(len(read_jsonl(f)) == 2 for f in answers + judgments)
    # one server for the whole group: a server log per service key started
    logs = sorted((run / "cache/servers").glob("*.server.log"))
    assert len(logs) == 1 and logs[0].name.startswith("smollm2"), logs
    # and stopped at the end of the run: no service left registered
    servers = run / "cache/servers"
    assert not list(servers.glob("*.json")), sorted(servers.iterdir())
