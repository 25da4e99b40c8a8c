"""Turning a request's token events into an SSE stream or one JSON response.

One SSE chunk per token that completes text. A token that ends inside a UTF-8 character (or
carries no text, like a special token) sends nothing: its bytes go out with the next chunk
that completes a character, so no chunk has empty content and a client that counts chunks as
tokens, or reads TTFT from the first chunk, counts text it can show. The last chunk carries
finish_reason, with no content if nothing is left. Token times are recorded per token anyway
(router.py), whatever the chunking. With stream_options.continuous_usage_stats (vLLM's) every
token gets its chunk, each carrying the usage so far: the replay client asks for it, to time
every token.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from gpuprobe.server import openai_api as oa
from gpuprobe.server.request_state import Tracked


class StreamText:
    """Incremental detokenization plus stop strings, and what each token puts on the wire."""

    def __init__(self, tokenizer, stop: tuple[str, ...]):
        from gpuprobe.llama.tokenizer import IncrementalDetokenizer

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

    def chunk(self, token_id: int, finish_reason: str | None) -> tuple[str, str | None] | None:
        """(text, finish_reason) of the chunk this token sends, or None to hold it back (it
        completes no character and finishes nothing). finish_reason is "stop" when a stop
        string ended the text."""
        piece = self.add(token_id)
        reason = finish_reason or ("stop" if self.stopped else None)
        return (piece, reason) if piece or reason else None


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
    text, n, sent, req = StreamText(model.tokenizer, t.req.stop), 0, 0, t.req
    ids: list[int] = []  # the tokens the next chunk's text comes from (return_token_ids)
    try:
        async for ev in _events(t):
            if ev[0] == "token":
                out = text.chunk(ev[1], ev[2])
                n += 1
                ids.append(ev[1])
                if out is None and req.continuous_usage:  # a chunk per token, its usage in it
                    out = ("", None)
                if out is not None:  # else held back: the next chunk carries these bytes
                    await resp.write(_sse(oa.stream_chunk(
                        req, t.rid, model.name, *out, first=sent == 0,
                        completion_tokens=n if req.continuous_usage else None, token_ids=ids)))
                    sent, ids = sent + 1, []
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
    except ConnectionResetError:
        # The client left. Once [DONE] was sent (a client that closes at [DONE]) the request
        # is complete and recorded: nothing to abort, and not an error to log.
        router.abort(t, "aborted")
    except asyncio.CancelledError:
        router.abort(t, "aborted")
        raise
    return resp


async def collect(t: Tracked, router, model) -> web.Response:
    text, n, reason = StreamText(model.tokenizer, t.req.stop), 0, None
    ids: list[int] = []
    try:
        async for ev in _events(t):
            if ev[0] == "error":
                return web.json_response({"error": {"message": ev[2], "type": "server_error",
                                                    "param": None, "code": None}},
                                         status=ev[1])
            if ev[0] == "token":
                text.add(ev[1])
                ids.append(ev[1])
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
                                              reason or "length", n, ids))
