"""The tap and a client that hangs up as soon as it reads [DONE] (guidellm does, now and
then): the request is recorded and no exception escapes the handler (aiohttp would log it as
"Error handling request")."""
import asyncio
import json
import logging
import socket
import struct

import pytest
from aiohttp import web
from gpuprobe.collectors.tap import Tap
from gpuprobe.store import Store


async def _upstream(request):
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i, piece in enumerate("abc"):
        chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
                 "choices": [{"index": 0, "delta": {"content": piece},
                              "finish_reason": "stop" if i == 2 else None}]}
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    usage = {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    await resp.write(b"data: " + json.dumps({"id": "c1", "choices": [], "usage": usage}).encode()
                     + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await asyncio.sleep(0.3)  # the client is gone before the stream's end reaches the tap
    await resp.write_eof()
    return resp


async def _start(app):
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


async def _read_to_done_and_reset(port: int) -> bytes:
    """A raw HTTP client: reads until [DONE], then closes with a reset (SO_LINGER 0)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"model": "m", "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    seen = b""
    while b"[DONE]" not in seen:
        data = await reader.read(65536)
        assert data, seen
        seen += data
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
    writer.close()
    return seen


@pytest.mark.timeout(30)
def test_client_closing_at_done_is_recorded_and_raises_nothing(tmp_path, caplog):
    async def run(store):
        up_app = web.Application()
        up_app.router.add_post("/v1/chat/completions", _upstream)
        up_runner, up_port = await _start(up_app)
        tap = Tap(f"http://127.0.0.1:{up_port}", store, run_id="t1", host="h1")
        tap_runner, tap_port = await _start(tap.app())
        try:
            seen = [await _read_to_done_and_reset(tap_port) for _ in range(3)]
            # the tap finishes each stream after its client left: until all three are recorded
            deadline = asyncio.get_running_loop().time() + 20
            while len(store.requests(source="tap")) < 3 and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
        finally:
            await tap_runner.cleanup()
            await up_runner.cleanup()
        return seen

    caplog.set_level(logging.DEBUG, logger="aiohttp")
    with Store.open(tmp_path / "s.db") as store:
        seen = asyncio.run(run(store))
        recs = store.requests(source="tap")
    assert all(b'"content": "c"' in s and b'"usage"' in s for s in seen)  # passed on as sent
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    assert len(recs) == 3 and (recs.status == "ok").all() and (recs.output_tokens == 3).all()
