"""The one client of a reference server's `/admin/*` API (apply, the dashboard's Apply, the
autopilot), stdlib HTTP only: a method per endpoint.

    admin = AdminClient("http://127.0.0.1:8000", token)
    admin.layout()                                  # GET /admin/layout
    admin.switch(layout_body(deployment), actor="gpuprobe-apply", reason="recommendation 3")
    admin.acquire_lease("autopilot@host:42", "autopilot", ttl_s=60)   # POST /admin/lease
    admin.renew_lease("autopilot@host:42"); admin.release_lease("autopilot@host:42")

Every failure is an AdminError whose `kind` says what happened, so a caller can say it in
one line and decide what to do next:
- unreachable: no answer (refused, DNS, a timeout before any reply);
- refused: 401/403 (the token), 404 (not a reference server) or another 4xx (the request);
- busy: 409, a switch already in progress (the server does not queue a second);
- held: 409, another controller holds the server's lease (the message names it and its
  expiry), or the caller's own lease ended (expired, or taken over with force: by whom);
- failed: the server tried and the new layout did not start (5xx), or its answer was unreadable;
- unknown: the connection broke or timed out while a switch was in flight: the layout must
  be read again rather than assumed.
"""
from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

from gpuprobe.errors import GpuprobeError

KINDS = ("unreachable", "refused", "busy", "held", "failed", "unknown")
SWITCH_TIMEOUT_S = 600.0  # starting a layout loads the model into new workers


class AdminError(GpuprobeError):
    """An /admin/* call that did not do what was asked (exit 1); `kind` is one of KINDS."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class AdminClient:
    def __init__(self, url: str, token: str | None, timeout_s: float = 10.0,
                 switch_timeout_s: float = SWITCH_TIMEOUT_S):
        self.url, self.token = url.rstrip("/"), token
        self.timeout_s, self.switch_timeout_s = timeout_s, switch_timeout_s

    def layout(self) -> dict:
        """GET /admin/layout: {layout, prefill_share, chunked_prefill_tokens, switching,
        history, ...}."""
        out = self._call("GET", "/admin/layout", None, self.timeout_s)
        if not isinstance(out, dict) or not isinstance(out.get("layout"), str):
            raise AdminError("failed", f"{self.url}/admin/layout has no layout in its answer")
        return out

    def switch(self, body: dict, actor: str, reason: str, holder: str | None = None,
               force: bool = False) -> dict:
        """POST /admin/layout with `body` (layout_body's), who asks and why; returns the
        server's history entry once the new layout is active. holder: the lease the caller
        holds; force: past another's lease, which it ends (the server records the takeover)."""
        extra = {"holder": holder} if holder else {}
        if force:
            extra["force"] = True
        return self._call("POST", "/admin/layout",
                          {**body, "actor": actor, "reason": reason[:200], **extra},
                          self.switch_timeout_s)

    def lease(self) -> dict:
        """GET /admin/lease: {held, holder, purpose, ttl_s, acquired_s, expires_s, ...}."""
        return self._call("GET", "/admin/lease", None, self.timeout_s)

    def acquire_lease(self, holder: str, purpose: str, ttl_s: float, force: bool = False) -> dict:
        """POST /admin/lease: hold the server for ttl_s s (its holder may call again to renew);
        force takes it from another holder (recorded). AdminError 'held' while another holds it."""
        return self._call("POST", "/admin/lease", {"holder": holder, "purpose": purpose[:200],
                                                   "ttl_s": ttl_s, "force": force}, self.timeout_s)

    def renew_lease(self, holder: str, ttl_s: float | None = None) -> dict:
        """PUT /admin/lease; AdminError 'held' when the lease is no longer the holder's."""
        body = {"holder": holder} if ttl_s is None else {"holder": holder, "ttl_s": ttl_s}
        return self._call("PUT", "/admin/lease", body, self.timeout_s)

    def release_lease(self, holder: str) -> dict:
        """DELETE /admin/lease."""
        return self._call("DELETE", "/admin/lease", {"holder": holder}, self.timeout_s)

    def _call(self, method: str, path: str, body: dict | None, timeout_s: float) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise _http_error(self.url, path, method, exc.code, *_message(exc)) from None
        except (urllib.error.URLError, OSError) as exc:  # ConnectionError, timeouts
            reason = getattr(exc, "reason", exc)
            if method == "POST" and path == "/admin/layout" and not _before_send(reason):
                raise AdminError("unknown", f"{self.url}: the switch request broke off ({reason}); "
                                 "the layout must be read again") from None
            raise AdminError("unreachable", f"cannot reach {self.url} ({reason})") from None
        except ValueError as exc:
            raise AdminError("failed", f"{self.url}{path} answered something that is not JSON "
                             f"({exc})") from None


def layout_body(d) -> dict:
    """The POST /admin/layout settings for Deployment `d`: the layout and what a live switch
    can change. Cross is sent as xPyD (num_prefill, num_decode): a server given remote workers
    runs it on the first x and y of them, one without starts that many workers itself; its
    prefill fraction splits the cores of workers it starts. max_num_seqs and tensor-parallel
    sizes are fixed when a server starts."""
    body: dict = {"layout": d.layout}
    if d.layout != "monolithic":
        body["prefill_share"] = round(float(d.prefill_fraction), 4)
    elif d.chunked_prefill_tokens:
        body["chunked_prefill_tokens"] = d.chunked_prefill_tokens
    if d.layout == "cross":
        body["num_prefill"], body["num_decode"] = d.num_prefill, d.num_decode
    return body


def _http_error(url: str, path: str, method: str, status: int, message: str,
                kind: str | None = None) -> AdminError:
    if status in (401, 403):
        return AdminError("refused", f"{url} refused the admin token ({status}: {message})")
    if status == 409 and kind == "lease_conflict":
        return AdminError("held", f"{url}: {message}")
    if status == 409:
        return AdminError("busy", f"{url}: a layout switch is already in progress ({message})")
    if status == 404:
        return AdminError("refused", f"{url} has no {path} (not a gpuprobe reference server?)")
    if status >= 500:
        what = "the switch failed" if method == "POST" else f"{path} failed"
        return AdminError("failed", f"{url}: {what} ({status}: {message}); the server keeps its layout")
    return AdminError("refused", f"{url}{path} refused the request ({status}: {message})")


def _before_send(reason) -> bool:
    """True when the request surely never reached the server (so nothing can have changed)."""
    return isinstance(reason, (ConnectionRefusedError, socket.gaierror))


def _message(exc: urllib.error.HTTPError) -> tuple[str, str | None]:
    """(the error body's message, its type: lease_conflict tells a held lease from a busy
    switch)."""
    try:
        body = json.loads(exc.read() or b"{}")
        err = body.get("error") or {}
        return str(err.get("message") or body)[:300], err.get("type")
    except (ValueError, AttributeError, OSError):
        return exc.reason or "no message", None
