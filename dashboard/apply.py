"""Apply a recommendation to a running reference server from the dashboard (no Streamlit).

The one call the Recommend page makes; the switch itself is `gpuprobe apply`'s
(`gpuprobe.decide.apply.apply_recommendation`: POST /admin/layout, confirm, mark the
recommendation applied). A malformed URL or an empty token is a UserError; a wrong token, an
unreachable server or a switch in progress an AdminError: one line each, nothing changed.
"""
from __future__ import annotations

from gpuprobe.decide.apply import apply_recommendation
from gpuprobe.errors import UserError
from gpuprobe.store import Store


def apply(store_path: str, rec_id: int, target: str, token: str) -> dict:
    """Switch `target` to recommendation `rec_id`; returns apply_recommendation's dict
    (layout, prefill_share, switch, applied_s, kept)."""
    target = target.strip().rstrip("/")
    if not target.startswith(("http://", "https://")):
        raise UserError(f"target {target!r}: give the server's URL, e.g. http://127.0.0.1:8000")
    if not token:
        raise UserError("the admin token is empty (the server's --admin-token-file or $GPUPROBE_ADMIN_TOKEN)")
    with Store.open(store_path, create=False) as store:
        return apply_recommendation(store, int(rec_id), target, token)
