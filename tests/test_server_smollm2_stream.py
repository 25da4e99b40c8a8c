"""SmolLM2-135M behind the reference server (its real byte-level BPE tokenizer), one server
for the module: the official openai client's streaming chat answers "Paris"; a streaming
client that counts chunks sees one chunk per token, none empty, and its TTFT is the first
token's; a 1 MB prompt, and a 400 KB one that must be tokenised, are refused without stalling
/health or a stream in flight."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from sse_read import sse_objects

from gpuprobe.server.launch import start_server
from gpuprobe.store import Store

pytestmark = pytest.mark.timeout(300)
MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("smol")
    srv = start_server(MODEL, "monolithic", store=str(tmp / "s.db"),
                       log_path=str(tmp / "server.log"))
    srv.store_path = tmp / "s.db"
    try:
        yield srv
    finally:
        assert srv.stop() == 0


def test_openai_client_streaming_chat_answers_paris(server):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", timeout=120)
    stream = client.chat.completions.create(
        model=MODEL, stream=True, max_tokens=40, temperature=0,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        stream_options={"include_usage": True})
    pieces, usage = [], None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
        if chunk.usage:
            usage = chunk.usage
    text = "".join(pieces)
    assert "Paris" in text, text
    assert text.isascii() and len(text.split()) >= 3, text  # English words, not noise
    assert usage is not None and usage.completion_tokens == len(pieces)


def _row(store_path, request_id: str, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with Store.open(store_path, read_only=True) as store:
            reqs = store.requests(source="server")
        hit = reqs[reqs.request_id == request_id]
        if len(hit):
            return hit.iloc[0]
        time.sleep(0.2)
    raise AssertionError(f"{request_id} not in the store")


async def _stream(session, url: str, body: dict) -> dict:
    """POST a stream; note each choice chunk's receive time and content."""
    out = {"chunks": [], "times": [], "usage": None, "id": None}
    out["sent"] = time.time()
    async with session.post(url, json=body) as resp:
        assert resp.status == 200, await resp.text()
        async for obj in sse_objects(resp):
            out["id"] = obj["id"]
            if obj["choices"]:
                out["chunks"].append(obj["choices"][0])
                out["times"].append(time.time())
            elif obj.get("usage"):
                out["usage"] = obj["usage"]["completion_tokens"]
    return out


def test_streaming_chunks_equal_tokens_and_first_chunk_is_the_first_token(server):
    body = {"model": MODEL, "stream": True, "max_tokens": 24, "temperature": 0,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "What is the capital of France?"}]}

    async def go():
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=240)) as s:
            return await _stream(s, server.url + "/v1/chat/completions", body)

    r = asyncio.run(go())
    row = _row(server.store_path, r["id"])
    contents = [c["delta"].get("content") for c in r["chunks"]]
    # English words: every token completes text, so one chunk per token, the stop token's
    # chunk (if it stopped) carrying only finish_reason.
    assert len(r["chunks"]) == r["usage"] == row.output_tokens, (contents, r["usage"])
    assert all(c for c in contents[:-1]) and "Paris" in "".join(c or "" for c in contents)
    assert contents[-1] is None or contents[-1] != ""  # never an empty content string
    token_s = [row.arrival_s + t for t in json.loads(row.token_times)]
    # The first chunk is the first token's: read after it was recorded (how soon after depends
    # on the client's share of a busy machine: no upper bound).
    assert token_s[0] <= r["times"][0]
    assert r["times"][0] - r["sent"] >= row.ttft_s


def _overlapping(spans, windows):
    return [(a, b) for a, b in spans if any(a < we and b > ws for ws, we in windows)]


def test_large_prompts_do_not_stall_health_or_a_stream(server):
    big = "The quick brown fox jumps over the lazy dog. " * 23_300  # 1 MB
    tokenised = big[:400_000]  # under the byte bound (5824 tokens x 81 bytes): tokenised

    async def go():
        timeout = aiohttp.ClientTimeout(total=240)
        async with aiohttp.ClientSession(timeout=timeout) as s, \
                aiohttp.ClientSession(timeout=timeout) as probe:
            stream = asyncio.ensure_future(_stream(s, server.url + "/v1/completions", {
                "model": MODEL, "prompt": "Once upon a time", "max_tokens": 40,
                "ignore_eos": True, "stream": True, "temperature": 0,
                "stream_options": {"include_usage": True}}))
            health, stop = [], False

            async def poll():
                while not stop:
                    t0 = time.time()
                    async with probe.get(server.url + "/health") as r:
                        assert r.status == 200
                    health.append((t0, time.time()))
                    await asyncio.sleep(0.02)

            poller = asyncio.ensure_future(poll())
            while len(health) < 15:  # the baseline: /health with the stream running
                await asyncio.sleep(0.02)
            windows, answers = [], []
            for path, payload in (
                    ("/v1/chat/completions", {"messages": [{"role": "user", "content": big}]}),
                    ("/v1/completions", {"prompt": big}),
                    ("/v1/completions", {"prompt": tokenised})):
                t0 = time.time()
                async with s.post(server.url + path, json={"model": MODEL, **payload}) as r:
                    answers.append((r.status, (await r.json())["error"]))
                windows.append((t0, time.time()))
                await asyncio.sleep(0.1)
            stop = True
            await poller
            return await stream, health, windows, answers

    def attempt():
        r, health, windows, answers = asyncio.run(go())
        assert [a[0] for a in answers] == [400, 400, 400], answers
        assert [a[1]["param"] for a in answers] == ["messages", "prompt", "prompt"]
        assert "bytes" in answers[0][1]["message"] and "bytes" in answers[1][1]["message"]
        assert "prompt alone has" in answers[2][1]["message"]  # this one was tokenised
        baseline = [b - a for a, b in health if a < windows[0][0]]
        during = [b - a for a, b in _overlapping(health, windows)]
        assert during, "no /health probe overlapped the large requests"
        # Delay: beyond the slowest the same probes (or the same stream's gaps) took without a
        # large prompt, so the machine's own scheduling noise on a shared VM is not counted.
        # Tokenising 1 MB on the event loop took 1.2 s here: far past the 400 ms allowed.
        health_delay = max(during) - max(baseline)
        # The stream is judged over the 1 MB prompts (refused by length, no tokenising): the
        # 400 KB one is tokenised in a thread, which keeps the loop free (/health above) but
        # takes ~0.4 s of a core that the decode worker shares on a 2-core machine.
        gaps = [(a, b) for a, b in zip(r["times"], r["times"][1:])]
        stream_gaps_during = [b - a for a, b in _overlapping(gaps, windows[:2])]
        usual = [b - a for a, b in gaps if (a, b) not in _overlapping(gaps, windows)]
        assert r["usage"] == 40 and all(c["text"] for c in r["chunks"][:-1])
        stream_delay = max(stream_gaps_during, default=0.0) - max(usual, default=0.0)
        return health_delay, stream_delay, (during, baseline, stream_gaps_during, usual)

    # Timed on a shared VM: more attempts when one meets a scheduling spike. A front
    # that tokenises on its event loop is late by seconds (issue 43 measured /health at 2.4 s).
    # 0.4 s: a third of the 1.2 s that tokenising on the loop cost, above a busy machine's spikes
    for tries in (1, 2, 3):
        health_delay, stream_delay, detail = attempt()
        if health_delay < 0.4 and stream_delay < 0.4:
            break
    assert health_delay < 0.4 and stream_delay < 0.4, (health_delay, stream_delay, detail)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with Store.open(server.store_path, read_only=True) as store:
            reqs = store.requests(source="server")
        if (reqs.status == "http_400").sum() >= 3 * tries:
            break
        time.sleep(0.3)
    refused = reqs[reqs.status == "http_400"]
    # Refusals are in the store, as the tap records them.
    assert len(refused) == 3 * tries and refused.error.str.contains("maximum context length").all()
