"""Whether a server runs what a recommendation asks: before Apply (no switch, no restart, when
it already does) and after it (a drift warning when someone switched it by hand since).

`current` is what the server says it runs: GET /admin/layout's answer, or the newest layout
event the server stored ({layout, prefill_share, chunked_prefill_tokens, since_s, actor}).
"""
from __future__ import annotations

import time

from gpuprobe.deploy.admin_client import layout_body

SHARE_TOLERANCE = 0.01  # shares are sent rounded to 4 places; 1% is the same split


def runs(deployment, current: dict | None) -> bool:
    """Whether `current` is the layout and live settings that applying `deployment` would
    switch to (layout, prefill share, chunked prefill budget)."""
    if not current or not current.get("layout"):
        return False
    want = layout_body(deployment)
    if current["layout"] != want["layout"]:
        return False
    for name in ("num_prefill", "num_decode"):  # cross xPyD, where the server says its counts
        if name in want and current.get(name) is not None and int(current[name]) != want[name]:
            return False
    if "prefill_share" in want:
        have = current.get("prefill_share")
        return have is not None and abs(float(have) - want["prefill_share"]) <= SHARE_TOLERANCE
    return (current.get("chunked_prefill_tokens") or None) == (want.get("chunked_prefill_tokens") or None)


def running_words(current: dict) -> str:
    """'intra with 50% prefill', 'monolithic with chunked prefill (2048 tokens a step)', ..."""
    layout = current.get("layout") or "unknown"
    if layout == "monolithic":
        c = current.get("chunked_prefill_tokens")
        return f"monolithic with chunked prefill ({int(c)} tokens a step)" if c else "monolithic (whole prompts first)"
    share = current.get("prefill_share")
    return f"{layout} with {float(share):.0%} prefill" if share is not None else layout


def drift_warning(rec, current: dict | None, where: str | None = None) -> str | None:
    """One line when recommendation `rec` was applied and the server now runs something else
    (switched by hand, by the autopilot or by another apply); None when it runs rec or when
    rec was never applied."""
    if not rec.applied_s or not current or runs(rec.deployment, current):
        return None
    who = current.get("actor")
    since = current.get("since_s")
    when = f" since {time.strftime('%H:%M:%S', time.localtime(since))}" if since else ""
    by = f" (switched by {who})" if who else ""
    server = where or rec.applied_target or "the server"
    return (f"Drift: {server} runs {running_words(current)}{when}{by}, not recommendation "
            f"{rec.id}'s {rec.label}, which was applied to it.")
