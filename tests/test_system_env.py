"""How a store system's own environment is installed (srb.system_env): uv when it sits beside the
interpreter (it is pinned in requirements.lock), pip otherwise, and pip's find-links passed on
to uv, which does not read pip's settings. The real builds run in tests/test_pg.py and the
workflow tests (Hindsight's and Cognee's venvs)."""

from __future__ import annotations

import sys
from pathlib import Path

from srb import system_env


def test_uv_installs_the_lock_without_dependencies_and_with_the_hosts_find_links(monkeypatch):
    monkeypatch.setattr(system_env, "uv_binary", lambda: "/opt/x/uv")
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels /srv/more")
    cmd = system_env.install_command(Path("/v/bin/python"), Path("envs/cognee.txt"))
    assert cmd == [
        "/opt/x/uv", "pip", "install", "--quiet", "--python", "/v/bin/python", "--no-deps",
        "--find-links", "/opt/wheels", "--find-links", "/srv/more", "-r", "envs/cognee.txt",
    ]  # fmt: skip


def test_pip_installs_the_lock_where_uv_is_absent(monkeypatch):
    monkeypatch.setattr(system_env, "uv_binary", lambda: None)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    cmd = system_env.install_command(Path("/v/bin/python"), Path("envs/cognee.txt"))
    assert cmd[:3] == ["/v/bin/python", "-m", "pip"]
    assert cmd[-4:] == ["--no-deps", "--prefer-binary", "-r", "envs/cognee.txt"]


def test_the_projects_environment_has_uv_beside_its_interpreter():
    """make setup installs the lock's uv into the venv; the workflow's jobs run that venv."""
    assert system_env.uv_binary() == str(Path(sys.executable).parent / "uv")
