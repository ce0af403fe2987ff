"""The shared encoder service computes the same vectors a job would, keeps the model server's
CPU priority, and fails loudly; the job using it never loads the model."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import numpy as np
import pytest

from srb.index.dense import Encoder
from srb.index.encoder_service import EncoderService
from srb.priority import autogroup_enabled, autogroup_nice
from srb.services import stop_servers

TEXTS = [
    "Does aspirin reduce the risk of myocardial infarction in adults over fifty?",
    "Methods: 412 patients were randomised to metformin or placebo for 24 weeks. " * 6,
    "BMI",
]


@pytest.fixture
def service(tmp_path: Path):
    svc = EncoderService("minilm", tmp_path / "servers", start_timeout_s=180)
    yield svc
    stop_servers(tmp_path / "servers")


def test_service_vectors_equal_the_jobs_own_and_the_job_never_loads_the_model(
    service: EncoderService, tmp_path: Path
) -> None:
    local = Encoder("minilm", threads=1, device="cpu").encode(TEXTS)
    remote_encoder = Encoder(
        "minilm", threads=1, cache_path=tmp_path / "emb.sqlite", service=service
    )
    remote = remote_encoder.encode(TEXTS)
    assert np.array_equal(remote, local)  # bit for bit: one embedding cache serves both paths
    assert remote.dtype == np.float32 and remote.shape == (3, 384)
    assert remote_encoder._model is None
    assert remote_encoder.encoded == 3
    # a second job sharing the cache encodes nothing and sends nothing
    again = Encoder("minilm", threads=1, cache_path=tmp_path / "emb.sqlite", service=None)
    assert np.array_equal(again.encode(TEXTS[::-1]), local[::-1])
    assert again.encoded == 0 and again._model is None


def test_one_service_is_shared_and_keeps_the_servers_priority(
    service: EncoderService, tmp_path: Path
) -> None:
    url = service.url()
    other = EncoderService("minilm", tmp_path / "servers")
    assert other.url() == url  # reused, not a second model in memory
    registries = list((tmp_path / "servers").glob("encoder-*.json"))
    assert len(registries) == 1
    info = json.loads(registries[0].read_text())
    assert httpx.get(f"{url}/health").json() == {
        "service": "srb-encoder",
        "spec": "minilm",
        "dim": 384,
    }
    if autogroup_enabled():
        assert autogroup_nice(info["pid"]) == 0


def test_bad_requests_are_refused_by_name(service: EncoderService) -> None:
    url = service.url()
    resp = httpx.post(f"{url}/encode", json={"texts": "one string"})
    assert resp.status_code == 400
    assert "texts must be a list of strings" in resp.json()["error"]
    assert httpx.post(f"{url}/embed", json={"texts": []}).status_code == 404


def test_a_service_gone_since_is_acquired_again_once_then_the_error_raised(
    tmp_path: Path, monkeypatch
) -> None:
    svc = EncoderService("minilm", tmp_path / "servers")
    acquired: list[str] = []

    def url() -> str:
        acquired.append("x")
        return "http://127.0.0.1:9"  # nothing listens there

    monkeypatch.setattr(svc, "url", url)
    with pytest.raises(httpx.TransportError):
        svc.encode(["x"])
    assert len(acquired) == 2  # the first try, then once more after acquiring again


def test_a_failing_encoding_raises_with_the_services_log_named(tmp_path: Path, monkeypatch) -> None:
    svc2 = EncoderService("minilm", tmp_path / "servers")

    class Refused:
        status_code = 500
        text = '{"error": "encoding failed: RuntimeError: out of memory"}'

    monkeypatch.setattr(svc2, "url", lambda: "http://127.0.0.1:9")
    monkeypatch.setattr(httpx, "post", lambda *a, **k: Refused())
    with pytest.raises(RuntimeError, match=r"answered 500: .*out of memory.*server\.log"):
        svc2.encode(["x"])


def test_a_killed_service_is_started_again_and_gives_the_same_vectors(
    service: EncoderService, tmp_path: Path
) -> None:
    first = service.encode(TEXTS)
    registry = next((tmp_path / "servers").glob("encoder-*.json"))
    pid = json.loads(registry.read_text())["pid"]
    os.killpg(pid, signal.SIGKILL)  # its own session: the service's whole group
    again = service.encode(TEXTS)
    assert np.array_equal(again, first)
    assert json.loads(registry.read_text())["pid"] != pid
