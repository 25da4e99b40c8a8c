"""Apply a recommendation to a running reference server from the dashboard (no Streamlit).

The one call the Recommend page makes; the switch itself is `gpuprobe apply`'s
(`gpuprobe.decide.apply.apply_recommendation`: POST /admin/layout, confirm, mark the
recommendation applied). A wrong token, an unreachable server, a switch in progress or
unreadable params raise ApplyError with one line, and nothing is changed.
"""
from __future__ import annotations

from gpuprobe.errors import GpuprobeError


class ApplyError(GpuprobeError):
    pass


def apply(store_path: str, rec_id: int, target: str, token: str) -> dict:
    """Switch `target` to recommendation `rec_id`; returns apply_recommendation's dict
    (layout, prefill_share, switch, applied_s, kept)."""
    target = target.strip().rstrip("/")
    if not target.startswith(("http://", "https://")):
        raise ApplyError(f"target {target!r}: give the server's URL, e.g. http://127.0.0.1:8000")
    if not token:
        raise ApplyError("the admin token is empty (the server's --admin-token-file or $GPUPROBE_ADMIN_TOKEN)")
    try:
        from gpuprobe.decide.apply import apply_recommendation
    except ImportError:
        raise ApplyError("Apply is not available in this build (gpuprobe.decide.apply is missing)") from None
    from gpuprobe.store import Store
    with Store.open(store_path, create=False) as store:
        try:
            return apply_recommendation(store, int(rec_id), target, token)
        except GpuprobeError as exc:  # ApplyError, UserError: one line each
            raise ApplyError(str(exc)) from None
