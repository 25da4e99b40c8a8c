"""Apply a recommendation to a running reference server: POST /admin/layout (which returns when
the new layout is active), confirm with GET /admin/layout, then mark the recommendation applied.

The server records the layout event itself, with the actor and the reason ("recommendation N")
sent here. Every failure is a GpuprobeError (exit 1) that says which one it was (unreachable,
token refused, a switch already in progress, the switch failed) and happens before anything is
stored, so a failed apply changes nothing; an unknown id is a UserError (exit 2).
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

from gpuprobe.decide.plans.reference import ACTOR, admin_body
from gpuprobe.decide.rec_params import load_recommendation, target_of
from gpuprobe.errors import GpuprobeError

SWITCH_TIMEOUT_S = 600.0  # starting a layout loads the model into new workers


class ApplyError(GpuprobeError):
    """Apply could not switch the server; nothing was changed."""


def apply_recommendation(store, rec_id: int, target: str, token: str, actor: str = ACTOR,
                         timeout_s: float = SWITCH_TIMEOUT_S) -> dict:
    """Switch `target` (http://host:port) to recommendation `rec_id`'s layout and mark it
    applied. Returns {recommendation, target, layout, prefill_share, chunked_prefill_tokens,
    switch (the server's history entry), applied_s, kept (what a live switch cannot change)}."""
    rec = load_recommendation(store, rec_id)
    t = target_of(rec)
    url = target.rstrip("/")
    body = admin_body(t, actor)
    before = _call(url, "GET", token, None, 10.0)  # reachable, token good: before switching
    if before.get("switching"):
        raise ApplyError(_http_fault(url, 409, "switching"))
    entry = _call(url, "POST", token, body, timeout_s)
    now = _call(url, "GET", token, None, 10.0)
    if now.get("layout") != t.layout:
        raise ApplyError(f"{url} reports layout {now.get('layout')!r} after switching to "
                         f"{t.layout!r}; the recommendation was not marked applied")
    # the server's clock: requests it records after this instant ran on the new layout
    applied_s = float(entry.get("ts_s", time.time())) + float(entry.get("duration_s", 0.0))
    store.mark_recommendation_applied(t.rec_id, url, ts_s=applied_s)
    kept = []
    if t.max_num_seqs:
        kept.append(f"max_num_seqs {t.max_num_seqs} (a serve flag: restart with "
                    f"--max-num-seqs {t.max_num_seqs})")
    if t.layout == "cross" and (t.prefill_devices, t.decode_devices) != (1, 1):
        kept.append(f"{t.prefill_devices}P{t.decode_devices}D (the reference server runs 1P1D; "
                    f"applied as prefill share {t.prefill_share:.2f})")
    return {"recommendation": t.rec_id, "target": url, "layout": now.get("layout"),
            "prefill_share": now.get("prefill_share"),
            "chunked_prefill_tokens": now.get("chunked_prefill_tokens"),
            "switch": entry, "applied_s": applied_s, "actor": actor,
            "reason": body["reason"], "kept": kept}


def _call(url: str, method: str, token: str, body: dict | None, timeout_s: float) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + "/admin/layout", data=data, method=method, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return json.load(r)
    except urllib.error.HTTPError as exc:
        raise ApplyError(_http_fault(url, exc.code, _message(exc))) from None
    except (urllib.error.URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        raise ApplyError(f"cannot reach {url}: {why}; nothing was changed") from None
    except ValueError as exc:
        raise ApplyError(f"{url}/admin/layout answered something that is not JSON: {exc}") \
            from None


def _http_fault(url: str, status: int, message: str) -> str:
    if status in (401, 403):
        return f"{url} refused the admin token ({status}: {message}); nothing was changed"
    if status == 409:
        return f"{url}: a layout switch is already in progress; nothing was changed, try again"
    if status == 404:
        return f"{url} has no /admin/layout (not a gpuprobe reference server?)"
    return f"{url}: the switch failed ({status}: {message}); the server keeps its layout"


def _message(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read())["error"]["message"])
    except (ValueError, KeyError, TypeError, OSError):
        return exc.reason or "no message"
