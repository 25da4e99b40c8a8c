"""Apply a recommendation to a running reference server from the dashboard (no Streamlit).

The one call the Recommend page makes; the switch itself is `gpuprobe apply`'s
(`gpuprobe.deploy.apply.apply_recommendation`: POST /admin/layout, confirm, mark the
recommendation applied). A malformed URL or an empty token is a UserError; a wrong token, an
unreachable server, a switch in progress or another controller's lease (an autopilot's,
named with its expiry) an AdminError: one line each, nothing changed. `force` takes the
server over from that controller, as `gpuprobe apply --force` does.
"""
from __future__ import annotations

from gpuprobe.deploy.admin_client import AdminError
from gpuprobe.deploy.apply import apply_recommendation
from gpuprobe.deploy.drift import running_words
from gpuprobe.errors import GpuprobeError, UserError
from gpuprobe.store import Store


def apply(store_path: str, rec_id: int, target: str, token: str, force: bool = False) -> dict:
    """Switch `target` to recommendation `rec_id`; returns apply_recommendation's dict
    (layout, prefill_share, switch, applied_s, kept, took_over)."""
    target = target.strip().rstrip("/")
    if not target.startswith(("http://", "https://")):
        raise UserError(f"target {target!r}: give the server's URL, e.g. http://127.0.0.1:8000")
    if not token:
        raise UserError("the admin token is empty (the server's --admin-token-file or $GPUPROBE_ADMIN_TOKEN)")
    with Store.open(store_path, create=False) as store:
        return apply_recommendation(store, int(rec_id), target, token, force=force)


def apply_failed(exc: GpuprobeError) -> str:
    """One line for an Apply that failed: what happened, then whether anything changed (said
    once, also where the message already says it)."""
    msg = str(exc).rstrip(". ")
    if isinstance(exc, AdminError) and exc.kind == "unknown":
        return f"Not applied: {msg}."  # cut off mid-switch: the message says to read the layout again
    if "nothing was changed" in msg.lower():
        return f"Not applied: {msg}."
    return f"Not applied: {msg}. Nothing was changed."


def applied_line(where: str, result: dict) -> str:
    """The success line: what the server runs now, with every setting the switch set
    (layout, prefill share, chunked prefill), or that it already ran it."""
    now = running_words(result)
    if result.get("unchanged"):
        return (f"Applied: {where} already ran {now}, so nothing was switched (no restart); "
                f"recommendation {result.get('recommendation')} is marked applied.")
    took = (result.get("switch") or {}).get("duration_s")
    return f"Applied: {where} now runs {now}" + (f" (switched in {took:.1f} s)." if took else ".")
