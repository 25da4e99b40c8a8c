"""What the last validate run on a workload says about a decision: the layout it measured
best against the chosen one, with both measured figures (SLO attainment, then p99 TBT:
validate's own order for "best"), for the answer's evidence and the confidence.

    v = last_validation(store, "azure-conv")
    compare_validation("monolithic", v)   # {agrees, text}
"""
from __future__ import annotations

import json

from gpuprobe.units import finite_number


def last_validation(store, workload: str | None) -> dict | None:
    """The newest validate run on `workload` (None: on any): {created_s, workload,
    best_measured, best_predicted, bar_met, body}, or None."""
    try:
        v = store.validations(workload) if workload else store.validations()
    except Exception:  # noqa: BLE001 - an older store without the table: nothing to compare
        return None
    if v is None or v.empty:
        return None
    last = v.iloc[-1]
    body = last.get("body")
    body = json.loads(body) if isinstance(body, str) else (body or {})
    return {"created_s": float(last.get("created_s") or 0), "workload": last.get("workload"),
            "best_measured": last.get("best_measured"), "best_predicted": last.get("best_predicted"),
            "bar_met": last.get("bar_met"), "device": last.get("device"), "body": body}


def compare_validation(layout: str, v: dict) -> dict:
    """{agrees, text}: the validate run's measured best layout against `layout`, with both
    figures (SLO attainment, then p99 TBT: validate's order for 'best')."""
    best = v.get("best_measured")
    body = v.get("body") or {}
    w = body.get("workload") or {}
    said = [f"{body['model']} model"] if body.get("model") else []
    if w.get("replayed_requests") or w.get("num_requests"):
        said.append(f"{w.get('replayed_requests') or w.get('num_requests')} requests")
    if w.get("token_scale"):
        said.append(f"lengths x{w['token_scale']:g}")
    where = f"the last validate on {v.get('workload') or 'this workload'}"
    where += f" ({', '.join(said)})" if said else ""
    if not best:
        return {"agrees": None, "text": f"{where} measured no best layout"}
    mine, theirs = measured(body, layout), measured(body, best)
    if len(body.get("summary") or {}) == 1:  # one layout measured is no comparison
        return {"agrees": None, "text": f"{where} measured only {best} ({_fig(theirs)})"}
    if best == layout:
        fig = f": {_fig(mine)}" if mine else ""
        return {"agrees": True, "text": f"{where} measured {best} best too{fig}"}
    if mine is None:
        return {"agrees": False, "text": f"{where} measured {best} best ({_fig(theirs)}) and did not "
                                         f"measure {layout}"}
    return {"agrees": False, "text": f"{where} measured {best} best: {_fig(theirs)}, against "
                                     f"{layout}'s {_fig(mine)}{_by(theirs, mine)}"}


def measured(body: dict, layout: str) -> dict | None:
    """A layout's measured SLO attainment and p99 TBT in a validate result, or None."""
    s = (body.get("summary") or {}).get(layout)
    rows = {r.get("metric"): r.get("measured") for r in body.get("rows") or []
            if isinstance(r, dict) and r.get("layout") == layout}
    if not s and not rows:
        return None
    return {"attain": (s or {}).get("slo_attainment_measured"), "tbt_p99_s": rows.get("tbt_p99_s"),
            "ttft_p99_s": rows.get("ttft_p99_s")}


def _fig(m: dict | None) -> str:
    if not m:
        return "not measured"
    parts = []
    if finite_number(m.get("attain")):
        parts.append(f"{m['attain']:.0%} of requests within the SLO")
    if finite_number(m.get("tbt_p99_s")):
        parts.append(f"p99 TBT {duration_words(m['tbt_p99_s'])}")
    return ", ".join(parts) or "no figures"


def _by(best: dict | None, mine: dict | None) -> str:
    """How much the measured best was ahead: attainment points, else p99 TBT."""
    if not best or not mine:
        return ""
    a, b = best.get("attain"), mine.get("attain")
    if finite_number(a) and finite_number(b) and abs(a - b) >= 0.005:
        return f" ({(a - b) * 100:+.0f} points of attainment)"
    t, u = best.get("tbt_p99_s"), mine.get("tbt_p99_s")
    if finite_number(t) and finite_number(u) and u > 0:
        return f" (p99 TBT {(t - u) / u:+.0%})"
    return ""


def duration_words(s: float) -> str:
    """Seconds as people read them: '80 ms', '3 s'."""
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.3g} s"
