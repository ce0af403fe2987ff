"""LLM faults through the fault proxy in front of a real vLLM server, each run through the
workflow (a fast subset; `python bench/reliability.py faults` runs every scenario): bounded
retries, a truthful exit status, broken judge answers counted invalid and never scored, and a
rerun after the fault heals that asks only what was not answered."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.reliability.fault_proxy import Fault, FaultProxy, body_key
from tests.reliability.llm_faults import FAST, SCENARIOS, run_all

pytestmark = pytest.mark.integration


class Upstream:
    """A stand-in upstream for the proxy's own tests: answers every chat request with its
    request number, so a test can tell a taped answer from a fresh one."""

    def __init__(self) -> None:
        self.calls = 0
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers["Content-Length"]))
                upstream.calls += 1
                data = json.dumps({"choices": [{"message": {"role": "assistant",
                                  "content": json.dumps({"n": upstream.calls})}}]}).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
JSON_BODY = {**BODY, "response_format": {"type": "json_object"}}


def post(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/chat/completions", json=body, timeout=5)


def test_the_proxy_injects_each_fault_on_its_window_and_tapes_answers() -> None:
    up = Upstream()
    proxy = FaultProxy(up.url, [Fault("status", 0, 1, status=503),
                                Fault("cut_content", 0, 1, json_only=True)]).start()  # fmt: skip
    try:
        assert post(proxy.url, BODY).status_code == 503  # request 0
        assert post(proxy.url, BODY).json()["choices"][0]["message"]["content"] == '{"n": 1}'
        cut = post(proxy.url, JSON_BODY).json()["choices"][0]["message"]["content"]
        assert cut == '{"n": 2}'[:4]  # the first JSON request's content, cut in half
        again = post(proxy.url, JSON_BODY).json()["choices"][0]["message"]["content"]
        assert again == '{"n": 2}' and up.calls == 2  # taped: upstream asked once per body
        assert proxy.stats.received[body_key(BODY)] == 2
        assert proxy.stats.delivered[body_key(BODY)] == 1  # the 503 delivered nothing
        assert dict(proxy.stats.faulted) == {"status": 1, "cut_content": 1}
    finally:
        proxy.stop()


def test_a_dead_proxy_refuses_connections_until_healed() -> None:
    up = Upstream()
    proxy = FaultProxy(up.url, [Fault("die", 1)]).start()
    try:
        assert post(proxy.url, BODY).status_code == 200
        with pytest.raises(httpx.TransportError):
            post(proxy.url, BODY)  # dropped, and the listener closes
        with pytest.raises(httpx.ConnectError):
            post(proxy.url, BODY)
        proxy.heal()
        assert post(proxy.url, BODY).status_code == 200
    finally:
        proxy.stop()


def test_the_scenarios_cover_every_fault_of_the_issue() -> None:
    kinds = {f.kind for s in SCENARIOS for f in s.faults}
    assert kinds == {"status", "slow", "cut_body", "non_json_body", "empty_choices", "die",
                     "cut_content", "non_json_content"}  # fmt: skip
    assert any(s.proxy_down for s in SCENARIOS)
    assert {s.expect for s in SCENARIOS} == {"heals", "fails", "invalid"}
    assert set(FAST) <= {s.name for s in SCENARIOS}


@pytest.fixture(scope="module")
def fast_outcomes(tmp_path_factory):
    _, outcomes = run_all(tmp_path_factory.mktemp("faults"), FAST)
    return {o.scenario.name: o for o in outcomes}


@pytest.mark.parametrize("name", FAST)
def test_an_llm_fault_is_bounded_truthful_and_healed_by_a_rerun(fast_outcomes, name: str) -> None:
    o = fast_outcomes[name]
    assert o.faulted, "the fault was never injected"
    assert o.wall_s <= o.bound_s, f"took {o.wall_s:.0f} s, bound {o.bound_s:.0f} s"
    if o.scenario.expect == "heals":
        assert o.returncode == 0, o.message
        assert o.identical, "outputs differ from the fault-free run's"
    elif o.scenario.expect == "fails":
        assert o.returncode != 0 and "failed" in o.message, o.message
        assert not o.partial, o.partial
        assert o.rerun_returncode == 0, o.message
        assert o.identical, "the healed rerun's outputs differ from the fault-free run's"
        assert o.repeated == 0
        assert o.rerun_calls == o.missing_calls > 0
    else:
        assert o.returncode == 0, o.message
        assert o.invalid == 9  # 3 cells x 3 questions, each broken on every attempt
        assert o.n_invalid == o.invalid and o.zero_scores == 0
    assert o.ok
