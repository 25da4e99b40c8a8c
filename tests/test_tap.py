"""The request tap: byte-exact pass-through and records, against a small real upstream
(fake_upstream, for deterministic bytes and cut connections) and the reference server."""
import asyncio
import json
import signal
import subprocess
import sys

import aiohttp
import pytest
from aiohttp import web
from gpuprobe.collectors.tap import Tap
from gpuprobe.server.kv_transfer import free_port
from gpuprobe.store import Store

NUM_TOKENS = 5


def sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


FINGERPRINT = "vllm-0.32.0-3f2a9c1d"


class FakeUpstream:
    """An OpenAI-style server that streams chat as vLLM 0.32 does, with fixed ids and timestamps
    so bytes can be compared: an opening chunk with the role and empty content, a chunk per
    token, `system_fingerprint` on the finish chunk, or, when the client asked for usage, on the
    usage chunk instead. It serves POST /tokenize (unless `tokenize` is off) and can cut a
    stream."""

    def __init__(self):
        self.bodies, self.headers, self.cut_after, self.tokenize = [], [], None, True

    async def count(self, request):
        if not self.tokenize:
            raise web.HTTPNotFound()
        body = await request.json()
        return web.json_response({"count": 7 if body.get("messages") else 3, "max_model_len": 2048,
                                  "tokens": list(range(7))})

    async def chat(self, request):
        body = await request.json()
        self.bodies.append(body)
        self.headers.append(dict(request.headers))
        usage = {"prompt_tokens": 7, "completion_tokens": NUM_TOKENS, "total_tokens": 7 + NUM_TOKENS}
        if not body.get("stream"):
            return web.json_response({"id": "c1", "object": "chat.completion", "model": body["model"],
                                      "choices": [{"index": 0, "message": {"role": "assistant", "content": "abcde"},
                                                   "finish_reason": "stop"}], "usage": usage})
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Upstream": "yes"})
        await resp.prepare(request)
        head = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": body["model"]}
        await resp.write(sse({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                    "logprobs": None, "finish_reason": None}]}))
        for i in range(NUM_TOKENS):
            last = i == NUM_TOKENS - 1
            chunk = {**head, "choices": [{"index": 0, "delta": {"content": "abcde"[i]},
                                          "finish_reason": "stop" if last else None}]}
            if last and not with_usage:
                chunk["system_fingerprint"] = FINGERPRINT
            if self.cut_after is not None and i == self.cut_after:
                request.transport.abort()  # upstream dies mid-stream: no closing chunk
                return resp
            await resp.write(sse(chunk))
            await asyncio.sleep(0.005)
        if with_usage:
            await resp.write(sse({**head, "choices": [], "usage": usage,
                                  "system_fingerprint": FINGERPRINT}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


async def start(app) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def with_tap(store, fn):
    fake = FakeUpstream()
    up_app = web.Application()
    up_app.router.add_post("/v1/chat/completions", fake.chat)
    up_app.router.add_post("/tokenize", fake.count)
    up_runner, up_url = await start(up_app)
    tap = Tap(up_url, store, run_id="t1", host="h1")
    tap_runner, tap_url = await start(tap.app())
    try:
        async with aiohttp.ClientSession() as client:
            return await fn(fake, client, up_url, tap_url)
    finally:
        await tap_runner.cleanup()  # flushes the records
        await up_runner.cleanup()


async def post(client, url, body):
    async with client.post(url + "/v1/chat/completions", json=body) as r:
        return r.status, dict(r.headers), await r.read()


BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("client_usage,tokenize", [(False, True), (True, True), (False, False)])
def test_stream_bytes_identical_and_recorded(tmp_path, client_usage, tokenize):
    body = dict(BODY, **({"stream_options": {"include_usage": True}} if client_usage else {}))

    async def run(fake, client, up, tap):
        fake.tokenize = tokenize
        return await post(client, up, body), await post(client, tap, body), fake.bodies

    with Store.open(tmp_path / "s.db") as store:
        direct, tapped, bodies = asyncio.run(with_tap(store, run))
        rec = store.requests(source="tap").iloc[0]
    assert tapped[0] == direct[0] == 200
    # Every byte of every chunk, the role chunk and the fingerprint included, is what the client
    # gets directly, and upstream saw the client's own request.
    assert tapped[2] == direct[2] and FINGERPRINT.encode() in tapped[2]
    assert bodies[1] == bodies[0] == body
    assert tapped[1]["X-Upstream"] == "yes"
    prompt = None if rec.prompt_tokens is None or rec.prompt_tokens != rec.prompt_tokens else rec.prompt_tokens
    assert (prompt, rec.output_tokens, rec.status) == ((7 if tokenize else None), NUM_TOKENS, "ok")
    assert len(json.loads(rec.token_times)) == NUM_TOKENS and rec.ttft_s > 0  # the role chunk is no token
    assert rec.tbt_p50_s > 0.003 and rec.e2e_s >= rec.ttft_s and rec.run_id == "t1"


@pytest.mark.timeout(30)
def test_upstream_disconnect_mid_stream(tmp_path):
    async def run(fake, client, up, tap):
        fake.cut_after = 2
        errors = []
        for url in (up, tap):
            try:
                await post(client, url, BODY)
                errors.append(None)
            except aiohttp.ClientPayloadError as exc:
                errors.append(type(exc))
        return errors

    with Store.open(tmp_path / "s.db") as store:
        errors = asyncio.run(with_tap(store, run))
        rec = store.requests(source="tap").iloc[0]
    assert errors == [aiohttp.ClientPayloadError, aiohttp.ClientPayloadError]
    assert rec.status == "upstream_disconnect" and len(json.loads(rec.token_times)) == 2


@pytest.mark.timeout(30)
def test_non_streaming_and_hop_by_hop_headers(tmp_path):
    body = dict(BODY, stream=False)

    async def run(fake, client, up, tap):
        headers = {"Connection": "keep-alive, X-Secret-Hop", "X-Secret-Hop": "1", "X-Trace": "t"}
        async with client.post(tap + "/v1/chat/completions", json=body, headers=headers) as r:
            data = await r.read()
        direct = await post(client, up, body)
        return data, direct[2], fake.headers[0]

    with Store.open(tmp_path / "s.db") as store:
        tapped, direct, seen = asyncio.run(with_tap(store, run))
        rec = store.requests(source="tap").iloc[0]
    assert tapped == direct
    assert "X-Secret-Hop" not in seen and seen.get("X-Trace") == "t"
    assert (rec.prompt_tokens, rec.output_tokens, rec.status) == (7, NUM_TOKENS, "ok")


@pytest.mark.timeout(30)
def test_upstream_unreachable_is_502_and_recorded(tmp_path):
    async def run():
        tap = Tap(f"http://127.0.0.1:{free_port()}", store, run_id="t1")
        runner, url = await start(tap.app())
        try:
            async with aiohttp.ClientSession() as client:
                return (await post(client, url, BODY))[0]
        finally:
            await runner.cleanup()

    with Store.open(tmp_path / "s.db") as store:
        assert asyncio.run(run()) == 502
        assert store.requests().status.tolist() == ["upstream_unreachable"]


@pytest.mark.timeout(120)
def test_tap_command_in_front_of_reference_server(reference_server, tmp_path):
    import openai

    port, store = free_port(), tmp_path / "tap.db"
    tap = subprocess.Popen([sys.executable, "-m", "gpuprobe.cli.main", "tap", "--upstream", reference_server,
                            "--listen", f"127.0.0.1:{port}", "--store", str(store)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert "listening" in tap.stdout.readline()

        def chat(base):
            client = openai.OpenAI(base_url=base + "/v1", api_key="none", timeout=60)
            stream = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                    max_tokens=8, temperature=0, stream=True)
            chunks = list(stream)
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks

        direct_text, direct_chunks = chat(reference_server)
        tapped_text, tapped_chunks = chat(f"http://127.0.0.1:{port}")
        assert tapped_text == direct_text and len(tapped_chunks) == len(direct_chunks)
        # The server sends a chunk per completed character, so the tiny model's random bytes
        # make fewer chunks than tokens; the tap times the chunks that carry content.
        content_chunks = sum(1 for c in tapped_chunks if c.choices and c.choices[0].delta.content)
    finally:
        tap.send_signal(signal.SIGTERM)
        out = tap.communicate(timeout=20)[0]
    assert tap.returncode == 0, out
    with Store.open(store) as s:
        rec = s.requests(source="tap").iloc[0]
    # No usage in these streams (the client asked for none, and the tap asks nothing on its
    # behalf): the prompt's length came from the server's /tokenize, the output's is the chunks
    # that carried text (a lower bound: the server merges a token with no text into the next).
    assert rec.status == "ok" and rec.prompt_tokens > 0
    assert len(json.loads(rec.token_times)) == rec.output_tokens == content_chunks <= 8
    assert 0 < rec.ttft_s <= rec.e2e_s
