"""The /admin/lease routes: acquire (POST), renew (PUT), release (DELETE), read (GET).

Every change is an `events` row (source "server", kinds lease_acquired, lease_takeover,
lease_released), so who held the server, and who took it over, stays in the store.
"""
from __future__ import annotations

import json
import time

from aiohttp import web

from gpuprobe.server.lease import Grant, Lease, LeaseError, parse_body


def lease_error(exc: LeaseError, view: dict | None = None) -> web.Response:
    """The error body; a refused layout change also carries the lease (`lease`: holder,
    expires_s, ...) for a client to show."""
    kind = "lease_conflict" if exc.status == 409 else "invalid_request_error"
    body: dict = {"error": {"message": str(exc), "type": kind, "param": exc.param}}
    if view is not None:
        body["lease"] = view
    return web.json_response(body, status=exc.status)


async def read_body(request: web.Request):
    try:
        return json.loads(await request.read() or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise LeaseError(f"request body is not valid JSON: {exc}", 400, "body") from None


def takeover_message(by: str, taken: Grant, how: str) -> str:
    why = f" ({taken.purpose})" if taken.purpose else ""
    return (f"{by} {how} over {taken.holder}'s lease{why}, which ran until "
            f"{time.strftime('%H:%M:%S', time.localtime(taken.expires_s))} (force)")


class LeaseRoutes:
    """`denied(request)` is the admin token check (a response, or None when allowed);
    `record(kind, message)` writes an event."""

    def __init__(self, lease: Lease, denied, record):
        self.lease, self._denied, self._record = lease, denied, record

    def routes(self) -> list:
        return [web.get("/admin/lease", self.get), web.post("/admin/lease", self.acquire),
                web.put("/admin/lease", self.renew), web.delete("/admin/lease", self.release)]

    async def get(self, request: web.Request) -> web.Response:
        return await self._answer(request, None)

    async def acquire(self, request: web.Request) -> web.Response:
        return await self._answer(request, self._acquire)

    async def renew(self, request: web.Request) -> web.Response:
        return await self._answer(request, self._renew)

    async def release(self, request: web.Request) -> web.Response:
        return await self._answer(request, self._release)

    async def _answer(self, request: web.Request, change) -> web.Response:
        """The token checked, `change` applied to the request's body (None: a read), then the
        lease as it stands; a LeaseError is its 4xx."""
        if (denied := self._denied(request)) is not None:
            return denied
        if change is not None:
            try:
                change(await read_body(request))
            except LeaseError as exc:
                return lease_error(exc)
        return web.json_response(self.lease.view())

    def _acquire(self, body) -> None:
        b = parse_body(body)
        held = self.lease.current()
        grant, taken = self.lease.acquire(b["holder"], b["purpose"], b["ttl_s"], b["force"])
        if taken is not None:
            self._record("lease_takeover", takeover_message(grant.holder, taken, "took the lease"))
        elif held is None:
            why = f" for {grant.purpose!r}" if grant.purpose else ""
            self._record("lease_acquired", f"{grant.holder} took the lease{why}, "
                                           f"TTL {grant.ttl_s:g} s")

    def _renew(self, body) -> None:
        b = parse_body({"ttl_s": None, **body} if isinstance(body, dict) else body, ttl_optional=True)
        self.lease.renew(b["holder"], b["ttl_s"])

    def _release(self, body) -> None:
        grant = self.lease.release(parse_body(body)["holder"])
        self._record("lease_released", f"{grant.holder} released the lease")
