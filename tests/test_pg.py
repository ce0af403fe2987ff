"""The private PostgreSQL (srb.pg) from the Hindsight environment's real binaries: extensions,
save and reopen, a clear error naming the data directory and log when it cannot start, no
server left behind however the job ends, and a password that never reaches a log."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from srb.errors import ConfigError
from srb.pg import CLUSTER_DIR, PostgresError, bin_dir, private_postgres
from tests.hindsight_env import hindsight_venv

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bins() -> Path:
    """The binaries of the venv the workflow builds (reused while envs/hindsight.txt holds)."""
    return bin_dir(hindsight_venv())


def _servers_under(runtime: Path) -> list[str]:
    out = subprocess.run(["pgrep", "-f", f"postgres -D {runtime}"], capture_output=True, text=True)
    return out.stdout.split()


def test_a_new_cluster_has_the_extensions_hindsight_needs(bins) -> None:
    with private_postgres(bins, None, ("vector", "pg_trgm", "btree_gist")) as pg:
        pg.query("create extension vector; create extension pg_trgm")
        got = pg.query("select extname from pg_extension order by extname")
        runtime = pg.runtime
        assert pg.query("show listen_addresses") == []  # empty: no TCP port, the socket only
    assert got == ["pg_trgm", "plpgsql", "vector"]
    assert not runtime.exists() and not _servers_under(runtime)


def test_a_saved_cluster_reopens_on_a_private_copy(bins, tmp_path) -> None:
    with private_postgres(bins) as pg:
        pg.query("create table t(x int); insert into t values (42)")
        pg.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [CLUSTER_DIR]  # no password kept
    with private_postgres(bins, tmp_path) as one, private_postgres(bins, tmp_path) as two:
        one.query("insert into t values (7)")  # two readers never share a server or files
        assert one.query("select count(*) from t") == ["2"]
        assert two.query("select count(*) from t") == ["1"]
    with private_postgres(bins, tmp_path) as again:  # the store itself was never written
        assert again.query("select x from t") == ["42"]


def test_a_missing_extension_is_named_before_anything_runs(bins) -> None:
    with pytest.raises(ConfigError, match="lacks the extension.*no_such_ext"):
        with private_postgres(bins, None, ("vector", "no_such_ext")):
            pass


def test_a_server_that_cannot_start_names_its_data_directory_and_log(bins, tmp_path) -> None:
    with private_postgres(bins) as pg:
        pg.save(tmp_path)
    (tmp_path / CLUSTER_DIR / "PG_VERSION").write_text("9\n")  # a cluster this build refuses
    with pytest.raises(PostgresError) as err:
        with private_postgres(bins, tmp_path):
            pass
    message = str(err.value)
    assert "did not start on data directory" in message and "server.log" in message
    assert "database files are incompatible" in message  # the log's own words


def test_no_server_outlives_a_job_killed_with_sigkill(bins, tmp_path) -> None:
    with private_postgres(bins) as pg:
        pg.save(tmp_path)
    code = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from pathlib import Path\n"
        "from srb.pg import private_postgres\n"
        f"with private_postgres(Path({str(bins)!r}), Path({str(tmp_path)!r})) as pg:\n"
        "    print(pg.runtime, flush=True)\n"
        "    time.sleep(120)\n"
    )
    job = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    runtime = Path(job.stdout.readline().strip())
    assert _servers_under(runtime), "the server should be up while the job runs"
    job.kill()
    job.wait()
    deadline = time.monotonic() + 20
    while _servers_under(runtime) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _servers_under(runtime)


def _files_holding(root: Path, needle: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


def test_the_password_never_reaches_a_log_or_the_store(bins, tmp_path, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    with private_postgres(bins) as pg:
        pg.query("create table t(x int)")
        pg.save(tmp_path)
        password, log_text = pg.password, pg.log_file.read_text()
        assert pg.password in pg.url and pg.password not in pg.safe_url
    with private_postgres(bins, tmp_path) as reopened:  # a copy of the store, its own password
        reopened.query("insert into t values (1)")
        second, second_log = reopened.password, reopened.log_file.read_text()
    assert len(password) >= 24 and len(second) >= 24 and second != password
    for secret in (password, second):
        assert secret not in caplog.text and secret not in log_text + second_log
        assert _files_holding(tmp_path, secret) == []  # the saved cluster holds only a hash
    assert "***" in caplog.text
