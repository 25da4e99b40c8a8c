"""The request tap: a reverse proxy in front of any OpenAI-compatible server that records
each request's timing (arrival, TTFT, per-token times, tokens, status) as source "tap".

    tap = Tap("http://127.0.0.1:8000", store)
    web.run_app(tap.app(), host="127.0.0.1", port=9000)

Every POST to a .../completions path is recorded with its outcome: a body upstream refuses
(status "http_400", no token counts) and an unreachable upstream ("upstream_unreachable", 502)
too. Streams pass through chunk by chunk, unchanged (tap_sse.py parses a copy). A stream without
usage (the client did not ask for it) gets its prompt length from upstream's POST /tokenize
(vLLM, SGLang and gpuprobe serve have it) after the client has its last byte; an upstream
without one leaves it unknown. If upstream cuts a stream, the tap cuts the client's connection
the same way (no closing chunk) and records "upstream_disconnect".
"""
from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Callable

import aiohttp
from aiohttp import web
from gpuprobe.collectors.tap_sse import SseWatch, request_record

from gpuprobe.errors import StoreError

# RFC 9110 7.6.1 hop-by-hop headers, plus the ones aiohttp recomputes for the new message.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailer", "trailers", "transfer-encoding", "upgrade", "proxy-connection",
              "host", "content-length"}
MAX_PENDING_RECORDS = 100_000


def forward_headers(headers) -> dict[str, str]:
    named = {h.strip().lower() for h in headers.get("Connection", "").split(",")}
    return {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP and k.lower() not in named}


class Tap:
    def __init__(self, upstream: str, store=None, run_id: str = "", host: str | None = None,
                 flush_interval_s: float = 1.0, log: Callable[[str], None] = print):
        self.upstream = upstream.rstrip("/")
        self.store, self.run_id, self.log = store, run_id, log
        self.host = host or socket.gethostname()
        self.flush_interval_s = flush_interval_s
        self.pending: list[dict] = []
        self.num_recorded = 0
        self._session: aiohttp.ClientSession | None = None
        self._flusher: asyncio.Task | None = None
        self._tokenize_ok = True

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, _app) -> None:
        # No automatic headers or decompression: upstream sees the client's request and the
        # client gets upstream's bytes.
        self._session = aiohttp.ClientSession(
            auto_decompress=False, skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        self._flusher = asyncio.create_task(self._flush_loop())

    async def _stop(self, _app) -> None:
        if self._flusher:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        await self.flush()
        if self._session:
            await self._session.close()

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            await self.flush()

    async def flush(self) -> None:
        rows, self.pending = self.pending, []
        if not rows or self.store is None:
            return
        try:
            await asyncio.shield(asyncio.to_thread(self.store.insert_requests, rows))
        except StoreError as exc:
            self.log(f"tap: store: {exc}; keeping records in memory")
            self.pending = (rows + self.pending)[-MAX_PENDING_RECORDS:]

    def _record(self, record: dict) -> None:
        self.pending.append(record)
        self.num_recorded += 1

    async def handle(self, request: web.Request) -> web.StreamResponse:
        arrival_s = time.time()
        body = await request.read()
        recorded = request.method == "POST" and request.path.rstrip("/").endswith("completions")
        # Not JSON (or not an object): forwarded as is, and recorded with upstream's answer (a 400).
        payload = (_json(body) if recorded else None) or {}
        meta = {"run_id": self.run_id, "host": self.host, "model": payload.get("model")}
        try:
            upstream = await self._session.request(
                request.method, self.upstream + request.rel_url.raw_path_qs, data=body or None,
                headers=forward_headers(request.headers), allow_redirects=False)
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            if recorded:
                self._record(request_record(arrival_s, time.time(), "upstream_unreachable",
                                            error=str(exc) or type(exc).__name__, **meta))
            return web.json_response({"error": {"message": f"gpuprobe tap: upstream {self.upstream} "
                                                f"unreachable ({exc})", "type": "bad_gateway"}}, status=502)
        async with upstream:
            if upstream.content_type == "text/event-stream":
                return await self._stream(request, upstream, arrival_s, payload, recorded, meta)
            return await self._whole(request, upstream, arrival_s, recorded, meta)

    async def _stream(self, request, upstream, arrival_s, payload, recorded, meta) -> web.StreamResponse:
        watch = SseWatch(arrival_s)
        resp = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                  headers=forward_headers(upstream.headers))
        await resp.prepare(request)
        status, error = "ok" if upstream.status < 400 else f"http_{upstream.status}", None
        while True:
            try:
                chunk = await upstream.content.readany()
            except Exception as exc:  # cut mid-stream (payload error, reset, timeout)
                status, error = "upstream_disconnect", str(exc) or type(exc).__name__
                break
            watch.feed(chunk, time.time())
            try:
                if chunk:
                    await resp.write(chunk)
            except (ConnectionError, RuntimeError) as exc:
                status, error = "client_disconnect", str(exc) or type(exc).__name__
                break
            if not chunk:
                break
        if status == "ok" and watch.error:
            status, error = "error", watch.error
        finish_s = time.time()
        if status in ("upstream_disconnect", "client_disconnect"):
            # No closing chunk: the client sees the incomplete stream it would have seen directly.
            if request.transport is not None:
                request.transport.abort()
        else:
            try:
                await resp.write_eof()
            except ConnectionError:
                pass  # a client that closes at [DONE] has all it wanted
        if recorded:
            prompt = None
            if status == "ok" and not (watch.usage or {}).get("prompt_tokens"):
                prompt = await self._prompt_tokens(request.path, payload)
            self._record(request_record(arrival_s, finish_s, status, token_s=watch.token_s,
                                        usage=watch.usage, request_id=watch.response_id,
                                        error=error, prompt_tokens=prompt,
                                        **{**meta, "model": watch.model or meta["model"]}))
        return resp

    async def _prompt_tokens(self, path: str, payload: dict) -> int | None:
        """The prompt's length in tokens from upstream's POST /tokenize, or None (no such
        endpoint, which is then not asked again, or an answer without a count)."""
        if not self._tokenize_ok:
            return None
        prompt = payload.get("prompt")
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            return len(prompt)  # token ids already
        keys = ("model", "messages", "add_generation_prompt", "continue_final_message",
                "chat_template_kwargs", "tools") if path.rstrip("/").endswith("chat/completions") \
            else ("model", "prompt", "add_special_tokens")
        body = {k: payload[k] for k in keys if k in payload}
        try:
            async with self._session.post(self.upstream + "/tokenize", data=json.dumps(body),
                                          headers={"Content-Type": "application/json"},
                                          timeout=aiohttp.ClientTimeout(total=10)) as r:
                text = await r.text(errors="replace")
                if r.status == 405 or (r.status == 404 and "model_not_found" not in text):
                    self._tokenize_ok = False
                    self.log(f"tap: {self.upstream} has no /tokenize: streams without usage "
                             f"are recorded without their prompt length")
                    return None
                count = json.loads(text).get("count") if r.status == 200 else None
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError, AttributeError):
            return None
        return count if isinstance(count, int) and not isinstance(count, bool) else None

    async def _whole(self, request, upstream, arrival_s, recorded, meta) -> web.StreamResponse:
        try:
            data = await upstream.read()
        except Exception as exc:
            if recorded:
                self._record(request_record(arrival_s, time.time(), "upstream_disconnect",
                                            error=str(exc) or type(exc).__name__, **meta))
            if request.transport is not None:
                request.transport.abort()
            raise web.HTTPBadGateway() from None
        finish_s = time.time()
        if recorded:
            obj = _json(data) or {}
            ok = upstream.status < 400
            self._record(request_record(
                arrival_s, finish_s, "ok" if ok else f"http_{upstream.status}",
                token_s=[finish_s] if ok else [], usage=obj.get("usage"), request_id=obj.get("id"),
                error=None if ok else data[:500].decode(errors="replace"),
                **{**meta, "model": obj.get("model") or meta["model"]}))
        return web.Response(body=data, status=upstream.status, reason=upstream.reason,
                            headers=forward_headers(upstream.headers))


def _json(body: bytes) -> dict | None:
    try:
        obj = json.loads(body) if body else None
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None
