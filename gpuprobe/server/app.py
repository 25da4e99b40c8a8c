"""The front's HTTP routes (aiohttp): OpenAI API, health, metrics, admin."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from aiohttp import web

from gpuprobe.server import admin
from gpuprobe.server import openai_api as oa
from gpuprobe.server.lease import MAX_HOLDER_CHARS, Lease, LeaseError, text_field
from gpuprobe.server.lease_api import LeaseRoutes, lease_error, takeover_message
from gpuprobe.server.options import LayoutConfig
from gpuprobe.server.request_state import Tracked
from gpuprobe.server.streaming import collect, stream

RETRY_AFTER_S = 1  # when a 429 names no better time


def _error(exc: oa.ApiError) -> web.Response:
    headers = ({"Retry-After": str(exc.retry_after_s or RETRY_AFTER_S)} if exc.status == 429
               else None)
    return web.json_response(exc.body(), status=exc.status, headers=headers)


def _parse_raw(raw: bytes, parse):
    """JSON-decode and parse (tokenise) a generation body; run in a thread, so a large body
    does not stall the event loop that streams everyone's tokens."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise oa.ApiError(f"request body is not valid JSON: {exc}", "body") from None
    return parse(body)


async def _json_body(request: web.Request):
    try:
        return json.loads(await request.read())
    except (ValueError, UnicodeDecodeError) as exc:
        raise oa.ApiError(f"request body is not valid JSON: {exc}", "body") from None


class ServerApp:
    """Holds the front's state; `app` is the aiohttp Application."""

    def __init__(self, model, router, metrics, admin_token: str | None, lease: Lease | None = None):
        self.model, self.router, self.metrics = model, router, metrics
        self._token = admin_token
        self.lease = lease or Lease()
        self.app = web.Application(client_max_size=64 << 20)
        self.app.add_routes([
            web.post("/v1/completions", self.completions),
            web.post("/v1/chat/completions", self.chat),
            web.get("/v1/models", self.models),
            web.post("/tokenize", self.tokenize),
            web.get("/health", self.health),
            web.get("/metrics", self.prom),
            web.get("/admin/layout", self.get_layout),
            web.post("/admin/layout", self.post_layout),
            web.get("/admin/workers", self.workers),
        ])
        self.app.add_routes(LeaseRoutes(self.lease, self._denied,
                                        router.telemetry.add_event).routes())

    # ---- OpenAI API ---------------------------------------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        tok, m = self.model.tokenizer, self.model
        return await self._generate(request, "cmpl", lambda body: oa.parse_completion(
            body, tok.encode, m.vocab_size, m.max_context, max_prompt_bytes=m.max_prompt_bytes))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        tok, m = self.model.tokenizer, self.model
        return await self._generate(request, "chatcmpl", lambda body: oa.parse_chat(
            body, tok.apply_chat_template, m.max_context, max_prompt_bytes=m.max_prompt_bytes))

    async def _generate(self, request: web.Request, prefix: str, parse) -> web.StreamResponse:
        arrival_s = time.time()
        rid, req = f"{prefix}-{uuid.uuid4().hex[:24]}", None
        try:
            try:
                raw = await request.read()
            except web.HTTPRequestEntityTooLarge as exc:
                raise oa.ApiError(f"request body is too large: {exc.text}", "body", 413) from None
            req = await asyncio.to_thread(_parse_raw, raw, parse)
            oa.check_model(req.model, self.model.name)
            t = Tracked(rid, req, arrival_s)
            self.router.submit(t)
        except oa.ApiError as exc:
            self.router.reject(rid, arrival_s, exc,
                               len(req.prompt_token_ids) if req else exc.prompt_tokens,
                               req.max_tokens if req else None)
            return _error(exc)
        if req.stream:
            return await stream(request, t, self.router, self.model)
        return await collect(t, self.router, self.model)

    async def tokenize(self, request: web.Request) -> web.Response:
        """vLLM's POST /tokenize: {"count", "max_model_len", "tokens"} for a completion's
        `prompt` or a chat's `messages` (the tap asks it for streams sent without usage)."""
        tok, m = self.model.tokenizer, self.model
        try:
            raw = await request.read()
            body = await asyncio.to_thread(_parse_raw, raw, lambda b: b)
            if not isinstance(body, dict):
                raise oa.ApiError("request body must be a JSON object", None)
            oa.check_model(body.get("model"), self.model.name)
            one = {k: body[k] for k in ("prompt", "messages") if k in body} | {"max_tokens": 1}
            if "messages" in one:
                req = await asyncio.to_thread(oa.parse_chat, one, tok.apply_chat_template,
                                              m.max_context, max_prompt_bytes=m.max_prompt_bytes)
            else:
                req = await asyncio.to_thread(oa.parse_completion, one, tok.encode, m.vocab_size,
                                              m.max_context, max_prompt_bytes=m.max_prompt_bytes)
        except oa.ApiError as exc:
            return _error(exc)
        ids = list(req.prompt_token_ids)
        return web.json_response({"count": len(ids), "max_model_len": m.max_context,
                                  "tokens": ids})

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response(oa.models_response(self.model.name, self.model.max_context,
                                                    self.model.vocab_size,
                                                    self.model.kv_bytes_per_token))

    async def health(self, request: web.Request) -> web.Response:
        active = self.router.active
        if active is None or self.router.closing:
            return web.json_response({"status": "unavailable"}, status=503)
        missing = [r for r in ("prefill", "decode") if active.remote and not active.in_rotation(r)]
        if missing:  # requests get 503 until a worker of that role answers again
            return web.json_response({"status": "unavailable", "layout": active.name,
                                      "reason": f"no {missing[0]} worker reachable"}, status=503)
        return web.json_response({"status": "ok", "layout": active.name})

    async def prom(self, request: web.Request) -> web.Response:
        running, waiting = self.router.counts()
        self.metrics.set_queue(running, waiting)
        self.metrics.set_predicted_wait(self.router.admission.predicted_wait_s(waiting))
        self.metrics.set_telemetry(self.router.telemetry.num_pending(),
                                   self.router.telemetry.num_dropped)
        return web.Response(body=self.metrics.exposition(),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    # ---- admin --------------------------------------------------------------------------
    def _denied(self, request: web.Request) -> web.Response | None:
        verdict = admin.check(self._token, request.headers.get("Authorization"))
        if verdict is None:
            return None
        status, message = verdict
        return web.json_response({"error": {"message": message, "type": "auth_error"}},
                                 status=status)

    async def get_layout(self, request: web.Request) -> web.Response:
        if (denied := self._denied(request)) is not None:
            return denied
        active = self.router.active
        cfg = active.cfg if active else None
        split = cfg is not None and cfg.layout == "cross"
        return web.json_response({
            "layout": cfg.layout if cfg else None,
            "prefill_share": cfg.prefill_share if cfg and cfg.layout != "monolithic" else None,
            "chunked_prefill_tokens": cfg.chunked_prefill_tokens if cfg else None,
            "num_prefill": cfg.num_prefill if split else None,
            "num_decode": cfg.num_decode if split else None,
            "workers": ("remote" if cfg.remote else "local") if cfg else None,
            "switching": self.router.switching, "history": self.router.history,
            "lease": self.lease.view()})

    async def post_layout(self, request: web.Request) -> web.Response:
        if (denied := self._denied(request)) is not None:
            return denied
        try:
            body = await _json_body(request)
            cfg = _layout_config(body, self.router.active, self.router.opts)
            actor, reason = _who(body)
            holder, force = _claim(body)
        except oa.ApiError as exc:
            return _error(exc)
        except LeaseError as exc:
            return lease_error(exc)
        active = self.router.active
        if cfg.remote and active is not None and active.remote:
            return web.json_response({"error": {"message": "the front already runs on its "
                                                "remote workers", "type": "conflict_error"}},
                                     status=409)
        # Checked after the last await before switch() takes the lock, so two posts cannot both
        # pass: the second is told, not queued behind the first (apply must change nothing).
        if self.router.switching:
            return web.json_response({"error": {"message": "a layout switch is already in progress",
                                                "type": "conflict_error"}}, status=409)
        try:
            taken = self.lease.check_change(holder, force, actor)
        except LeaseError as exc:
            return lease_error(exc, self.lease.view())
        detail = None
        if taken is not None:
            self.router.telemetry.add_event("lease_takeover", takeover_message(
                holder or actor, taken, "forced a layout change"))
            detail = {"forced_over": {"holder": taken.holder, "purpose": taken.purpose,
                                      "expires_s": taken.expires_s}}
        try:
            entry = await self.router.switch(cfg, actor=actor, reason=reason, detail=detail)
        except RuntimeError as exc:
            return web.json_response({"error": {"message": str(exc), "type": "server_error"}},
                                     status=500)
        return web.json_response(entry)

    async def workers(self, request: web.Request) -> web.Response:
        if (denied := self._denied(request)) is not None:
            return denied
        return web.json_response({"workers": self.router.worker_pids()})


def _who(body: dict) -> tuple[str, str]:
    """(actor, reason) for the layout event: who asked (default 'admin') and why."""
    actor, reason = body.get("actor", "admin"), body.get("reason", "")
    for name, value, limit in (("actor", actor, 64), ("reason", reason, 200)):
        if not isinstance(value, str) or len(value) > limit or not value.isprintable():
            raise oa.ApiError(f"'{name}' must be printable text of at most {limit} characters",
                              name)
    if not actor:
        raise oa.ApiError("'actor' must not be empty", "actor")
    return actor, reason


def _claim(body: dict) -> tuple[str | None, bool]:
    """(the lease holder the change comes from, None for none; whether it forces its way past
    another's lease)."""
    holder, force = body.get("holder"), body.get("force", False)
    if holder is not None:
        text_field("holder", holder, MAX_HOLDER_CHARS, required=True)
    if not isinstance(force, bool):
        raise LeaseError("'force' must be true or false", 400, "force")
    return holder, force


LAYOUT_FIELDS = ("layout", "prefill_share", "chunked_prefill_tokens", "num_prefill",
                 "num_decode", "workers", "actor", "reason", "holder", "force")


def _workers(body: dict, opts) -> tuple[bool, int, int]:
    """(remote, num_prefill, num_decode) of a switch: cross goes to the remote workers the
    front was given unless 'workers' is 'local'; by default all of them (xPyD: the first x
    and y when num_prefill, num_decode say so)."""
    given = (len(opts.prefill_workers), len(opts.decode_workers))
    workers = body.get("workers", "remote" if given[0] and body["layout"] == "cross" else "local")
    if workers not in ("local", "remote"):
        raise oa.ApiError("'workers' must be 'local' or 'remote'", "workers")
    remote = workers == "remote"
    if remote and not given[0]:
        raise oa.ApiError("'workers': 'remote' needs a front started with --prefill-workers "
                          "and --decode-workers", "workers")
    counts = []
    for name, default in (("num_prefill", given[0] if remote else 1),
                          ("num_decode", given[1] if remote else 1)):
        n = body.get(name, default)
        if isinstance(n, bool) or not isinstance(n, int):
            raise oa.ApiError(f"'{name}' must be an integer", name)
        if remote and n > default:
            raise oa.ApiError(f"'{name}' {n}: the front was given {default} such workers", name)
        counts.append(n)
    return remote, counts[0], counts[1]


def _layout_config(body, active, opts) -> LayoutConfig:
    if not isinstance(body, dict) or not isinstance(body.get("layout"), str):
        raise oa.ApiError("'layout' must be one of monolithic, intra, cross", "layout")
    # A misspelt field ('prefil_share') was ignored and the switch went ahead at the default.
    unknown = [k for k in body if k not in LAYOUT_FIELDS]
    if unknown:
        raise oa.ApiError(f"unknown field {unknown[0]!r}; the fields are {', '.join(LAYOUT_FIELDS)}",
                          unknown[0])
    share = body.get("prefill_share", active.cfg.prefill_share if active else 0.5)
    if isinstance(share, bool) or not isinstance(share, (int, float)):
        raise oa.ApiError("'prefill_share' must be a number in (0, 1)", "prefill_share")
    chunk = body.get("chunked_prefill_tokens")
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int)):
        raise oa.ApiError("'chunked_prefill_tokens' must be an integer", "chunked_prefill_tokens")
    remote, num_prefill, num_decode = _workers(body, opts)
    try:
        return LayoutConfig(body["layout"], float(share), chunk, num_prefill, num_decode, remote)
    except ValueError as exc:
        param = str(exc).split(" ", 1)[0]
        raise oa.ApiError(str(exc), param) from None
