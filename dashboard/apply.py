"""Apply a recommendation to a running reference server from the dashboard (no Streamlit).

`apply(store_path, rec, target, token)` is the one call the Recommend page makes. It uses
`gpuprobe.decide.apply.apply_recommendation` when this build has it (it records the layout
event's actor and marks the recommendation applied itself); otherwise it switches the server
directly: `POST /admin/layout` with the bearer token, then reads `GET /admin/layout` back.
A wrong token, an unreachable server or a refused switch raise ApplyError with one line, and
nothing is marked applied.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request

from gpuprobe.errors import GpuprobeError

SERVER_PARAMS = ("prefill_share", "chunked_prefill_tokens")  # what POST /admin/layout takes


class ApplyError(GpuprobeError):
    pass


def apply(store_path: str, rec: dict, target: str, token: str, timeout_s: float = 180.0) -> dict:
    """Switch `target` to `rec`'s layout; returns {"switch": the server's answer, "layout":
    GET /admin/layout afterwards}."""
    target = target.rstrip("/")
    if not target.startswith(("http://", "https://")):
        raise ApplyError(f"target {target!r}: give the server's URL, e.g. http://127.0.0.1:8000")
    if not token:
        raise ApplyError("the admin token is empty (the server's --admin-token-file or $GPUPROBE_ADMIN_TOKEN)")
    try:
        from gpuprobe.decide.apply import apply_recommendation
    except ImportError:
        apply_recommendation = None
    if apply_recommendation is not None:
        from gpuprobe.store import Store
        with Store.open(store_path) as store:
            try:
                result = apply_recommendation(store, int(rec["id"]), target, token)
            except GpuprobeError as exc:
                raise ApplyError(str(exc)) from None
        return {"switch": result, "layout": current_layout(target, token)}
    entry = post_layout(target, token, layout_body(rec), timeout_s)
    _mark_applied(store_path, int(rec["id"]), target)
    return {"switch": entry, "layout": current_layout(target, token)}


def layout_body(rec: dict) -> dict:
    """POST /admin/layout's body for a recommendation: its layout and the parameters the
    reference server takes (others, such as cross's device counts, are for other engines)."""
    params = dict(rec.get("params") or {})
    if rec.get("prefill_share") is not None:
        params.setdefault("prefill_share", rec["prefill_share"])
    body = {"layout": rec["layout"], "reason": f"dashboard: recommendation {rec['id']}"}
    for key in SERVER_PARAMS:
        if params.get(key) is not None and not (key == "prefill_share" and rec["layout"] == "monolithic"):
            body[key] = params[key]
    return body


def post_layout(target: str, token: str, body: dict, timeout_s: float = 180.0) -> dict:
    return _call("POST", target + "/admin/layout", token, body, timeout_s)


def current_layout(target: str, token: str) -> dict:
    return _call("GET", target + "/admin/layout", token, None, 10.0)


def _call(method: str, url: str, token: str, body: dict | None, timeout_s: float) -> dict:
    req = urllib.request.Request(url, method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return json.load(r)
    except urllib.error.HTTPError as exc:
        raise ApplyError(f"{url}: {exc.code} {_message(exc)}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ApplyError(f"cannot reach {url}: {reason}") from None
    except ValueError:
        raise ApplyError(f"{url}: the answer is not JSON (is this a gpuprobe server?)") from None


def _message(exc: urllib.error.HTTPError) -> str:
    try:
        return json.load(exc)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return exc.reason or ""


def _mark_applied(store_path: str, rec_id: int, target: str) -> None:
    from gpuprobe.store import Store
    with Store.open(store_path, create=False) as store:
        store.mark_recommendation_applied(rec_id, target)
