"""Admission by predicted wait and what the server records of every request, on the tiny
model: past --max-queue-wait the server answers 429 with Retry-After; refused requests are in
the store with their status; vLLM's request_success and per-request histograms on /metrics
equal the store's rows."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from gpuprobe.server.launch import start_server
from gpuprobe.store import Store

pytestmark = pytest.mark.timeout(240)
BODY = {"prompt": [1, 2, 3], "max_tokens": 20, "ignore_eos": True, "stream": True}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("adm")
    # One sequence at a time and a 10 ms wait limit: once the server has seen one request
    # wait behind another, any request arriving while one waits is predicted to wait longer.
    srv = start_server("tiny", "monolithic", store=str(tmp / "s.db"), max_num_seqs=1,
                       max_queue=64, max_queue_wait="10ms")
    srv.store_path = tmp / "s.db"
    try:
        yield srv
    finally:
        assert srv.stop() == 0


async def _post(s, url, body, read_all=True):
    async with s.post(url + "/v1/completions", json=body) as r:
        if r.status == 200 and read_all:
            await r.read()
        return r.status, r.headers.get("Retry-After"), (await r.json() if r.status != 200 else None)


def _metrics(url: str) -> dict:
    return _parse(requests.get(url + "/metrics", timeout=10).text)


def _parse(text: str) -> dict:
    """/metrics as {(name, reason or status label): value}, summed over other labels."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for smp in fam.samples:
            key = (smp.name, smp.labels.get("finished_reason") or smp.labels.get("status")
                   or smp.labels.get("reason"))
            out[key] = out.get(key, 0.0) + smp.value
    return out


async def _queue(s, url: str) -> tuple[float, float]:
    """(running, waiting) as the server counts them now (read on each /metrics scrape)."""
    async with s.get(url + "/metrics") as r:
        m = _parse(await r.text())
    return m[("vllm:num_requests_running", None)], m[("vllm:num_requests_waiting", None)]


async def _wait_for(s, url: str, running: int, waiting: int) -> None:
    while await _queue(s, url) != (running, waiting):
        await asyncio.sleep(0.02)


async def _one_behind_another(s, url: str, long_tokens: int):
    """Start a request of long_tokens, then (once it runs: one sequence at a time) a short
    one that waits behind it; returns both tasks once the server counts one running and one
    waiting. Each stage waits on the server's own counts, so a slow client cannot spread
    the arrivals out."""
    long = asyncio.create_task(_post(s, url, {**BODY, "max_tokens": long_tokens}))
    await _wait_for(s, url, 1, 0)
    queued = asyncio.create_task(_post(s, url, BODY))
    await _wait_for(s, url, 1, 1)
    return long, queued


def test_predicted_wait_past_the_limit_is_429_with_retry_after(server):
    async def third_while_one_waits():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
            # the estimate: a first token that came a long request's 500 tokens after the one
            # before it
            assert [(await t)[0] for t in await _one_behind_another(s, server.url, 500)] \
                == [200, 200]
            # a third request while one waits is predicted to wait past the 10 ms limit
            long, queued = await _one_behind_another(s, server.url, 1000)
            third = await _post(s, server.url, BODY)
            return [await long, await queued, third]
    results = asyncio.run(third_while_one_waits())
    assert [r[0] for r in results] == [200, 200, 429], results
    _, retry_after, err = results[2]
    assert int(retry_after) >= 1 and "--max-queue-wait" in err["error"]["message"]


def test_metrics_equal_the_store_and_refusals_are_recorded(server):
    requests.post(server.url + "/v1/completions", data=b"{not json", timeout=30)
    requests.post(server.url + "/v1/completions", json={"model": "other", "prompt": "x"},
                  timeout=30)
    context = requests.get(server.url + "/v1/models", timeout=30).json()["data"][0]["max_model_len"]
    too_long = requests.post(server.url + "/v1/completions", timeout=30,
                             json={"prompt": [7] * context, "max_tokens": 4})
    assert too_long.status_code == 400
    assert too_long.json()["error"]["code"] == "context_length_exceeded"

    async def aborted():  # a client that leaves after the first chunk
        async with aiohttp.ClientSession() as s:
            async with s.post(server.url + "/v1/completions",
                              json={**BODY, "max_tokens": 2000}) as r:
                await r.content.readline()

    asyncio.run(aborted())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = _metrics(server.url)
        finished = sum(v for (k, _), v in m.items() if k == "gpuprobe_requests_finished_total")
        with Store.open(server.store_path, read_only=True) as store:
            rows, arrivals = store.requests(source="server"), store.arrivals()
        if len(rows) == finished and m[("vllm:num_requests_running", None)] == 0 \
                and m[("vllm:request_success_total", "abort")] == 1 \
                and len(arrivals) == m[("gpuprobe_requests_arrived_total", None)]:
            break
        time.sleep(0.3)
    for status, n in rows.status.value_counts().items():
        assert m[("gpuprobe_requests_finished_total", status)] == n, status
    assert {"http_400", "http_404", "http_429", "ok", "aborted"} <= set(rows.status)
    refused = rows[rows.status.str.startswith("http_")]
    assert (refused.output_tokens == 0).all() and refused.error.notna().all()
    # every request was stored as it arrived, with what the server held then; each refusal
    # with its reason, counted by reason on /metrics
    assert sorted(arrivals.request_id) == sorted(rows.request_id)
    came = arrivals.set_index("request_id").loc[rows.request_id]
    assert list(came.status) == [s if s.startswith("http_") else "admitted" for s in rows.status]
    assert (came.num_in_flight >= 0).all() and (came.num_waiting <= came.num_in_flight).all()
    reasons = arrivals.reason.dropna().value_counts().to_dict()
    assert {"invalid_request", "model_not_found", "context_length_exceeded",
            "max_queue_wait"} <= set(reasons), reasons
    assert reasons["context_length_exceeded"] == 1
    assert arrivals[arrivals.reason == "context_length_exceeded"].prompt_tokens.tolist() == [context]
    for reason, n in reasons.items():
        assert m[("gpuprobe_requests_refused_total", reason)] == n, reason
    ran = rows[rows.status.isin(["ok", "aborted"])]
    assert m[("vllm:request_success_total", "length")] == (ran.status == "ok").sum()
    assert m[("vllm:request_success_total", "abort")] == (ran.status == "aborted").sum() == 1
    assert m[("vllm:request_success_total", "stop")] == 0
    assert m[("vllm:request_prompt_tokens_count", None)] == len(ran)
    assert m[("vllm:request_prompt_tokens_sum", None)] == ran.prompt_tokens.sum()
    assert m[("vllm:request_generation_tokens_sum", None)] == ran.output_tokens.sum()
    queued = ran.queue_s.dropna()
    assert m[("vllm:request_queue_time_seconds_count", None)] == len(queued)
    assert m[("vllm:request_queue_time_seconds_sum", None)] == pytest.approx(queued.sum())
