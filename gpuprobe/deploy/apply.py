"""Apply a recommendation to a running reference server: POST /admin/layout (which returns when
the new layout is active), confirm with GET /admin/layout, then mark the recommendation applied.

The server records the layout event itself, with the actor and the reason ("recommendation N")
sent here. While another controller (an autopilot) holds the server's lease the switch is
refused, naming the holder and its expiry; `force` goes through, ends that lease (the
autopilot stops) and the server records the takeover. Every failure is an AdminError (exit 1) whose kind says which one it was
(unreachable, refused, busy, failed, unknown) and happens before anything is stored, so a
failed apply changes nothing; an unknown id is a UserError (exit 2).
"""
from __future__ import annotations

import time

from gpuprobe.deploy.admin_client import SWITCH_TIMEOUT_S, AdminClient, AdminError, layout_body
from gpuprobe.deploy.drift import runs
from gpuprobe.decide.recommendation import load_recommendation

ACTOR = "gpuprobe-apply"  # who the server's layout event names, unless the caller says


def apply_recommendation(store, rec_id: int, target: str, token: str, actor: str = ACTOR,
                         timeout_s: float = SWITCH_TIMEOUT_S, force: bool = False) -> dict:
    """Switch `target` (http://host:port) to recommendation `rec_id`'s layout and mark it
    applied. Where the server already runs it, nothing is switched (a switch restarts the
    workers) and `unchanged` is True. Returns {recommendation, target, layout, prefill_share,
    chunked_prefill_tokens, switch (the server's history entry, None when unchanged),
    applied_s, kept (what a live switch cannot change), unchanged, took_over (the lease holder
    `force` went past, or None)}. AdminError 'held' while another controller holds the
    server's lease and `force` is not given."""
    rec = load_recommendation(store, rec_id)
    d = rec.deployment
    admin = AdminClient(target, token, switch_timeout_s=timeout_s)
    before = admin.layout()
    if before.get("switching"):  # reachable, token good, and not busy: before switching
        raise AdminError("busy", f"{admin.url}: a layout switch is already in progress; nothing "
                         f"was changed, try again")
    lease = before.get("lease") or {}
    reason = f"recommendation {rec.id}"
    if runs(d, before):  # a switch to what runs would restart its workers for nothing
        now = before
        store.mark_recommendation_applied(rec.id, admin.url, ts_s=time.time())
        return {"recommendation": rec.id, "target": admin.url, "layout": now.get("layout"),
                "prefill_share": now.get("prefill_share"),
                "chunked_prefill_tokens": now.get("chunked_prefill_tokens"), "switch": None,
                "applied_s": time.time(), "actor": actor, "reason": reason,
                "kept": kept_by_live_switch(d), "unchanged": True, "took_over": None}
    try:
        entry = admin.switch(layout_body(d), actor, reason, force=force)
    except AdminError as exc:
        if exc.kind == "held":
            raise AdminError("held", f"{exc}; nothing was changed") from None
        raise
    now = admin.layout()
    if now.get("layout") != d.layout:
        raise AdminError("failed", f"{admin.url} reports layout {now.get('layout')!r} after "
                         f"switching to {d.layout!r}; the recommendation was not marked applied")
    # the server's clock: requests it records after this instant ran on the new layout
    applied_s = float(entry.get("ts_s", time.time())) + float(entry.get("duration_s", 0.0))
    store.mark_recommendation_applied(rec.id, admin.url, ts_s=applied_s)
    return {"recommendation": rec.id, "target": admin.url, "layout": now.get("layout"),
            "prefill_share": now.get("prefill_share"),
            "chunked_prefill_tokens": now.get("chunked_prefill_tokens"),
            "switch": entry, "applied_s": applied_s, "actor": actor, "reason": reason,
            "kept": kept_by_live_switch(d), "unchanged": False,
            "took_over": lease.get("holder") if force and lease.get("held") else None}


def kept_by_live_switch(d) -> list[str]:
    """What of Deployment `d` a live switch of the reference server does not change."""
    kept = []
    if d.max_num_seqs:
        kept.append(f"max_num_seqs {d.max_num_seqs} (a serve flag: restart with "
                    f"--max-num-seqs {d.max_num_seqs})")
    if d.layout == "cross" and (d.prefill_tp, d.decode_tp) != (1, 1):
        kept.append(f"tensor parallel {d.prefill_tp} per prefill and {d.decode_tp} per decode "
                    f"worker (the reference server's workers hold one device each)")
    return kept
