"""Turning a request's token events into an SSE stream or one JSON response.

One SSE chunk per generated token (its text may be empty while a UTF-8 character or a
special token is in progress), so clients can count tokens by chunks, as with vLLM.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from gpuprobe.server import openai_api as oa
from gpuprobe.server.request_state import Tracked


class _Text:
    """Incremental detokenization plus stop strings."""

    def __init__(self, tokenizer, stop: tuple[str, ...]):
        from gpuprobe.model.tokenizer import IncrementalDetokenizer

        self._detok = IncrementalDetokenizer(tokenizer)
        self._stop = stop
        self.text = ""
        self.stopped = False

    def add(self, token_id: int) -> str:
        """The text this token adds, cut at a stop string (then self.stopped)."""
        piece = self._detok.add(token_id)
        if not self._stop or not piece:
            self.text += piece
            return piece
        full = self.text + piece
        cut = min((i for i in (full.find(s) for s in self._stop) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            piece = full[len(self.text):cut] if cut > len(self.text) else ""
        self.text += piece
        return piece


async def _events(t: Tracked):
    """Yields t's events until the terminal one (included)."""
    while True:
        ev = await t.events.get()
        yield ev
        if ev[0] != "token":
            return


def _sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


async def stream(request: web.Request, t: Tracked, router, model) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                       "Cache-Control": "no-cache"})
    await resp.prepare(request)
    text, n, req = _Text(model.tokenizer, t.req.stop), 0, t.req
    try:
        async for ev in _events(t):
            if ev[0] == "token":
                piece = text.add(ev[1])
                n += 1
                reason = ev[2] or ("stop" if text.stopped else None)
                await resp.write(_sse(oa.stream_chunk(req, t.rid, model.name, piece, reason,
                                                      first=n == 1)))
                if text.stopped and ev[2] is None:
                    router.abort(t, "ok", "stop")
                    break
            elif ev[0] == "error":
                await resp.write(_sse({"error": {"message": ev[2], "type": "server_error",
                                                 "code": ev[1]}}))
        if req.include_usage and t.error is None:
            await resp.write(_sse(oa.usage_chunk(req, t.rid, model.name, n)))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    except (asyncio.CancelledError, ConnectionResetError):
        router.abort(t, "aborted")
        raise
    return resp


async def collect(t: Tracked, router, model) -> web.Response:
    text, n, reason = _Text(model.tokenizer, t.req.stop), 0, None
    try:
        async for ev in _events(t):
            if ev[0] == "error":
                return web.json_response({"error": {"message": ev[2], "type": "server_error",
                                                    "param": None, "code": None}},
                                         status=ev[1])
            if ev[0] == "token":
                text.add(ev[1])
                n += 1
                reason = ev[2]
                if text.stopped and ev[2] is None:
                    router.abort(t, "ok", "stop")
                    reason = "stop"
                    break
    except asyncio.CancelledError:
        router.abort(t, "aborted")
        raise
    return web.json_response(oa.full_response(t.req, t.rid, model.name, text.text,
                                              reason or "length", n))
