"""Apply a recommendation to a running reference server from the dashboard (no Streamlit).

The one call the Recommend page makes; the switch itself is `gpuprobe apply`'s
(`gpuprobe.decide.apply.apply_recommendation`: POST /admin/layout, confirm, mark the
recommendation applied). A malformed URL or an empty token is a UserError; a wrong token, an
unreachable server, a switch in progress or another controller's lease (an autopilot's,
named with its expiry) an AdminError: one line each, nothing changed. `force` takes the
server over from that controller, as `gpuprobe apply --force` does.
"""
from __future__ import annotations

from gpuprobe.decide.apply import apply_recommendation
from gpuprobe.errors import UserError
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
