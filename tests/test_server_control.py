"""Who may change a live server, and what it keeps while its store is locked: the controller
lease over real HTTP (acquire, renew, release, a change from another refused with 409 naming
the holder, a forced change recorded as a takeover), and telemetry that holds every row in
memory while another process holds the store's write lock. One tiny server for the module."""
from __future__ import annotations

import asyncio
import sqlite3
import time

import aiohttp
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_for

from gpuprobe.server.launch import start_server
from gpuprobe.store import Store

TOKEN = "lease-token-3c1d"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ctl")
    (tmp / "token").write_text(TOKEN)
    srv = start_server("tiny", "monolithic", store=str(tmp / "s.db"), log_path=str(tmp / "log"),
                       admin_token_file=str(tmp / "token"), max_num_seqs=64, max_queue=64,
                       max_queue_wait="0")
    srv.db, srv.log = tmp / "s.db", tmp / "log"
    try:
        yield srv
    finally:
        assert srv.stop() == 0


def _lease(server, method: str, body: dict | None = None) -> requests.Response:
    return requests.request(method, server.url + "/admin/lease", headers=AUTH, json=body,
                            timeout=30)


def _layout(server, body: dict) -> requests.Response:
    return requests.post(server.url + "/admin/layout", headers=AUTH, json=body, timeout=180)


def _metrics(url: str) -> dict:
    text = requests.get(url + "/metrics", timeout=10).text
    return {(s.name, s.labels.get("table") or s.labels.get("reason")): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_lease_refuses_others_and_records_a_forced_takeover(server):
    t_start = time.time()
    assert _lease(server, "GET").json() == {"held": False}
    got = _lease(server, "POST", {"holder": "autopilot@a:1", "purpose": "autopilot", "ttl_s": 120})
    assert got.status_code == 200 and got.json()["holder"] == "autopilot@a:1"
    other = _lease(server, "POST", {"holder": "apply@b:2", "ttl_s": 60})
    assert other.status_code == 409 and "held by autopilot@a:1 for 'autopilot' until" in \
        other.json()["error"]["message"]
    refused = _layout(server, {"layout": "monolithic", "chunked_prefill_tokens": 64,
                               "actor": "gpuprobe-apply"})
    assert refused.status_code == 409 and refused.json()["error"]["type"] == "lease_conflict"
    assert refused.json()["lease"]["holder"] == "autopilot@a:1"
    assert refused.json()["lease"]["expires_s"] == pytest.approx(got.json()["expires_s"], abs=1)
    before = got.json()["expires_s"]
    renewed = _lease(server, "PUT", {"holder": "autopilot@a:1"})
    assert renewed.status_code == 200 and renewed.json()["expires_s"] >= before
    view = requests.get(server.url + "/admin/layout", headers=AUTH, timeout=10).json()
    assert view["layout"] == "monolithic" and view["lease"]["holder"] == "autopilot@a:1"

    forced = _layout(server, {"layout": "monolithic", "chunked_prefill_tokens": 64,
                              "actor": "gpuprobe-apply", "reason": "a person", "force": True})
    assert forced.status_code == 200, forced.text
    lost = _lease(server, "PUT", {"holder": "autopilot@a:1"})
    assert lost.status_code == 409 and "gpuprobe-apply forced a layout change at" in \
        lost.json()["error"]["message"]
    assert _lease(server, "DELETE", {"holder": "apply@b:2"}).status_code == 409
    assert _lease(server, "POST", {"holder": "apply@b:2"}).status_code == 200
    assert _lease(server, "DELETE", {"holder": "apply@b:2"}).json()["held"] is False

    def stored():
        with Store.open(server.db, read_only=True) as store:
            ev, lay = store.events(source="server", since_s=t_start), \
                store.layout_events(since_s=t_start)
        return (ev, lay) if len(ev) >= 4 and len(lay) >= 1 else None
    events, layouts = wait_for(stored, "the lease's events in the store")
    assert list(events.kind) == ["lease_acquired", "lease_takeover", "lease_acquired",
                                 "lease_released"]
    assert "gpuprobe-apply forced a layout change over autopilot@a:1's lease (autopilot)" in \
        events.message.iloc[1]
    assert layouts.actor.iloc[-1] == "gpuprobe-apply"
    assert '"forced_over": {"holder": "autopilot@a:1"' in layouts.detail.iloc[-1]


@pytest.mark.parametrize("method, body, field", [
    ("POST", {"holder": ""}, "holder"), ("POST", {"holder": "x", "ttl_s": "1m"}, "ttl_s"),
    ("PUT", {"holder": "x", "ttl_s": -1}, "ttl_s"), ("DELETE", {"who": "x"}, "who")])
def test_a_malformed_lease_request_is_400_naming_the_field(server, method, body, field):
    r = _lease(server, method, body)
    assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
    assert requests.get(server.url + "/admin/lease", timeout=10).status_code == 401  # no token


async def _serve(url: str, n: int) -> list[int]:
    body = {"prompt": [5, 6, 7, 8], "max_tokens": 6, "ignore_eos": True}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=240)) as s:
        async def one():
            async with s.post(url + "/v1/completions", json=body) as r:
                await r.read()
                return r.status
        return await asyncio.gather(*(one() for _ in range(n)))


def test_a_locked_store_loses_no_request_or_step(server):
    """Another process holds the store's write lock for 15 s while the server serves 50
    requests: every row waits in memory, and all of them are in the store afterwards."""
    t_start = time.time()
    locker = sqlite3.connect(server.db, isolation_level=None, timeout=30)
    locker.execute("BEGIN IMMEDIATE")
    try:
        held_since = time.monotonic()
        statuses = asyncio.run(_serve(server.url, 50))
        assert statuses == [200] * 50
        # the rows of all 50 wait in memory (the log says so), none lost
        wait_for(lambda: "telemetry: the store is busy" in server.log.read_text(), "the busy line")
        m = _metrics(server.url)
        assert m[("gpuprobe_telemetry_pending_rows", None)] >= 50
        assert m[("gpuprobe_telemetry_dropped_rows_total", "requests")] == 0
        time.sleep(max(0.0, 15.0 - (time.monotonic() - held_since)))  # the lock's 15 s
    finally:
        locker.execute("COMMIT")
        locker.close()

    def stored():
        with Store.open(server.db, read_only=True) as store:
            reqs = store.requests(source="server", since_s=t_start)
            steps = store.steps(since_s=t_start)
        return (reqs, steps) if len(reqs) >= 50 else None
    reqs, steps = wait_for(stored, "50 request rows")
    assert len(reqs) == 50 and (reqs.status == "ok").all() and (reqs.output_tokens == 6).all()
    # every step the server ran made a row: /metrics counts the same steps
    def drained():
        m = _metrics(server.url)
        return m if m[("gpuprobe_telemetry_pending_rows", None)] == 0 else None
    m = wait_for(drained, "nothing pending")
    with Store.open(server.db, read_only=True) as store:
        all_steps = store.steps()
    assert len(all_steps) == m[("vllm:iteration_tokens_total_count", None)]
    assert steps.num_decode_seqs.sum() + steps.num_prefill_seqs.sum() >= 50 * 6
    assert all(v == 0 for (name, _), v in m.items() if name == "gpuprobe_telemetry_dropped_rows_total")
    assert "the store takes writes again" in server.log.read_text()
