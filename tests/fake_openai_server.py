"""Test double: a small real aiohttp OpenAI-compatible server (streaming /v1/completions) that
can refuse (429) or drop connections mid-stream, run in a thread on 127.0.0.1 and a free port."""
from __future__ import annotations

import asyncio
import json
import threading

from aiohttp import web


class FakeOpenAIServer:
    def __init__(self, refuse_every: int = 0, drop_every: int = 0, token_delay_s: float = 0.001, vocab: int = 5000):
        self.refuse_every, self.drop_every, self.token_delay_s, self.vocab = refuse_every, drop_every, token_delay_s, vocab
        self.bodies: list[dict] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.url = ""

    async def _models(self, request):
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "vocab_size": self.vocab}]})

    async def _completions(self, request):
        body = await request.json()
        self.bodies.append(body)
        n = len(self.bodies)
        if self.refuse_every and n % self.refuse_every == 0:
            return web.json_response({"error": "busy"}, status=429)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(body["max_tokens"]):
            if self.drop_every and n % self.drop_every == 0 and i == 2:
                request.transport.abort()
                return resp
            chunk = {"choices": [{"index": 0, "text": "x", "finish_reason": None}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await asyncio.sleep(self.token_delay_s)
        usage = {"choices": [], "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": body["max_tokens"]}}
        await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        return resp

    async def _start(self):
        app = web.Application(client_max_size=64 << 20)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._completions)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def __enter__(self):
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc):
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
