"""A store system's own Python environment, built from its full lock in `envs/<name>.txt`.

Why: some memory libraries (Hindsight's server, Cognee) pin versions the project's environment
cannot hold (see envs/README.md). Their code then runs in a venv of their own, built here by the
workflow (rule `system_env`) and reused while the lock is unchanged: a rerun, even with
`--forceall`, checks the lock's hash and installs nothing. Every package comes from the lock
with `--no-deps`, so the environment is the same on every machine. The installer is uv (pinned
in requirements.lock), which downloads in parallel: Cognee's 178 packages took 232 s with pip on
a clean clone (30% CPU: waiting on one download after another) and under 10 s with uv; pip is
the fallback where uv is absent.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from srb.atomic import atomic_write
from srb.errors import ConfigError

log = logging.getLogger(__name__)

STAMP = "srb-lock.sha256"


def lock_hash(requirements: Path) -> str:
    return hashlib.sha256(requirements.read_bytes()).hexdigest()


def env_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def uv_binary() -> str | None:
    """The uv beside this interpreter (the project's venv), else on PATH, else None."""
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("uv")


def find_links() -> list[str]:
    """pip's --find-links from the environment (PIP_FIND_LINKS, space-separated): uv does not
    read pip's settings, and a host may keep wheels (e.g. torch's CPU build) only there."""
    return [
        a for link in os.environ.get("PIP_FIND_LINKS", "").split() for a in ("--find-links", link)
    ]


def install_command(python: Path, requirements: Path) -> list[str]:
    """Install every pinned package of `requirements` into `python`'s venv, nothing else."""
    uv = uv_binary()
    if uv:
        return [uv, "pip", "install", "--quiet", "--python", str(python), "--no-deps",
                *find_links(), "-r", str(requirements)]  # fmt: skip
    return [str(python), "-m", "pip", "--disable-pip-version-check", "install", "-q",
            "--no-deps", "--prefer-binary", "-r", str(requirements)]  # fmt: skip


def _install(cmd: list[str], log_file: Path | None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if log_file is not None:
        with log_file.open("a") as fh:
            fh.write(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"installing failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")


def ensure_env(
    system: str, requirements: Path, venv: Path, log_file: Path | None = None
) -> dict[str, Any]:
    """Build (or reuse) `venv` from `requirements`; returns the env record the jobs read.
    A file lock keeps two jobs from building one venv at once; a half-built venv has no stamp,
    so the next attempt rebuilds it from scratch."""
    if not requirements.is_file():
        raise ConfigError(f"system {system}: its lock {requirements} is missing")
    wanted = lock_hash(requirements)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = venv / STAMP
        started = time.monotonic()
        built = False
        if not (stamp.is_file() and stamp.read_text().strip() == wanted):
            log.info("%s: building its environment %s from %s", system, venv, requirements)
            if venv.exists():
                subprocess.run(["rm", "-rf", str(venv)], check=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            cmd = install_command(env_python(venv), requirements)
            log.info("%s: installing with %s", system, Path(cmd[0]).name)
            _install(cmd, log_file)
            with atomic_write(stamp) as fh:
                fh.write(wanted + "\n")
            built = True
        else:
            log.info(
                "%s: its environment %s matches %s; nothing to install", system, venv, requirements
            )
    return {
        "system": system,
        "venv": str(venv.resolve()),
        "python": str(env_python(venv.resolve())),
        "lock": str(requirements),
        "lock_sha256": wanted,
        "built": built,
        "seconds": round(time.monotonic() - started, 1),
    }


def read_env(record_file: str | os.PathLike[str]) -> dict[str, Any]:
    """The env record written by rule `system_env`; its venv must still match the lock."""
    record = json.loads(Path(record_file).read_text())
    stamp = Path(record["venv"]) / STAMP
    if not stamp.is_file() or stamp.read_text().strip() != record["lock_sha256"]:
        raise ConfigError(
            f"{record_file}: the environment {record['venv']} no longer matches "
            f"{record['lock']}; rerun the workflow (rule system_env rebuilds it)"
        )
    return record
