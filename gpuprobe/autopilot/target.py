"""The target server's admin API: read its layout, switch it. Stdlib HTTP only.

Every failure comes back as a `TargetError` whose `kind` says what happened, so the loop logs
one line and decides what to do next:
- unreachable: no answer (refused, DNS, timeout before a reply);
- refused: 401/403 (the token) or 4xx (the request); busy: 409, a switch in progress;
- failed: the server tried and the new layout did not start (5xx);
- unknown: the connection broke or timed out while a switch was in flight: the layout is
  re-read on the next interval rather than assumed.
"""
from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request


class TargetError(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class Target:
    def __init__(self, url: str, token: str | None, timeout_s: float = 5.0,
                 switch_timeout_s: float = 180.0):
        self.url, self.token = url.rstrip("/"), token
        self.timeout_s, self.switch_timeout_s = timeout_s, switch_timeout_s

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
            msg = _message(exc)
            if exc.code == 409:
                raise TargetError("busy", f"{self.url} is switching already ({msg})") from None
            if exc.code in (401, 403):
                raise TargetError("refused", f"{self.url} refused the admin token ({exc.code}: {msg})") from None
            if exc.code >= 500:
                raise TargetError("failed", f"{self.url} answered {exc.code}: {msg}") from None
            raise TargetError("refused", f"{self.url} answered {exc.code}: {msg}") from None
        except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if method == "POST" and data is not None and not _before_send(reason):
                raise TargetError("unknown", f"{self.url}: the switch request broke off ({reason}); "
                                  "the layout is re-read next interval") from None
            raise TargetError("unreachable", f"{self.url} is unreachable ({reason})") from None
        except ValueError as exc:
            raise TargetError("failed", f"{self.url} answered something not JSON ({exc})") from None

    def layout(self) -> dict:
        """{layout, prefill_share, history, ...} from GET /admin/layout."""
        out = self._call("GET", "/admin/layout", None, self.timeout_s)
        if not isinstance(out, dict) or not isinstance(out.get("layout"), str):
            raise TargetError("failed", f"{self.url}/admin/layout has no layout in its answer")
        return out

    def switch(self, layout: str, params: dict, reason: str) -> dict:
        """POST /admin/layout; returns the server's history entry once the switch is done."""
        from gpuprobe.decide.rec_params import layout_request, target_of

        # the body apply sends for the same params (cross xPyD as its prefill share)
        body = {**layout_request(target_of({"id": 0, "layout": layout, "params": params})),
                "reason": reason[:200], "actor": "autopilot"}
        return self._call("POST", "/admin/layout", body, self.switch_timeout_s)


def _before_send(reason) -> bool:
    """True when the request surely never reached the server (so nothing can have changed)."""
    return isinstance(reason, (ConnectionRefusedError, socket.gaierror))


def _message(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read() or b"{}")
        return str((body.get("error") or {}).get("message") or body)[:200]
    except (ValueError, AttributeError, OSError):
        return exc.reason or ""
