"""`recommend --check ID`: what a recommendation predicted against what the store measured on
the reference server since it was applied. The loop closed.

Measured: the server's own request records (source "server") that arrived after the switch
(`applied_s`, on the server's clock) and ran on the recommended layout, summarised with the
simulator's definitions (gpuprobe/validate/verdict.py: TTFT and pooled inter-token gap
percentiles; a request meets the SLO when its TTFT and its mean TBT are within the targets).
"""
from __future__ import annotations

import json
import math

import numpy as np

from gpuprobe.decide.candidates import Candidate
from gpuprobe.decide.recommendation import Recommendation, load_recommendation
from gpuprobe.errors import UserError

METRICS = ("ttft_p50_s", "ttft_p99_s", "tbt_p50_s", "tbt_p99_s", "slo_attainment")


def check_recommendation(store, rec_id: int) -> dict:
    """{id, layout, applied_s, applied_target, num_requests, num_ok, slo, metrics: [{metric,
    predicted, measured, rel_error}], note}. UserError when the id is unknown or not applied."""
    from gpuprobe.perf.metrics import Slo
    from gpuprobe.validate.verdict import measured_summary

    rec = load_recommendation(store, rec_id, "--check")
    if rec.applied_s is None:
        raise UserError(f"recommendation {rec_id} has not been applied: run gpuprobe apply "
                        f"--recommendation {rec_id} --target URL first")
    ttft_s, tbt_s = rec.slo.ttft_s, rec.slo.tbt_s
    reqs = store.requests(source="server", since_s=rec.applied_s)
    reqs = reqs[reqs["layout"] == rec.layout]
    run = _switched_run(store, rec)
    if run is not None:  # only the server that was switched, when others share the store,
        run_id, host, until_s = run  # and only until its next switch
        reqs = reqs[(reqs["run_id"] == run_id) & (reqs["host"] == host)
                    & (reqs["arrival_s"] < (until_s or float("inf")))]
    if len(reqs):
        reqs = reqs.assign(token_times=[json.loads(x) if isinstance(x, str) else (x or [])
                                        for x in reqs["token_times"]])
        measured = measured_summary(reqs, Slo(ttft_s, tbt_s), 1)
    else:
        measured = {}
    predicted = predicted_metrics(rec)
    rows = []
    for m in METRICS:
        p, v = _num(predicted.get(m)), _num(measured.get(m))
        err = (v - p) / p if p not in (None, 0) and v is not None else None
        rows.append({"metric": m, "predicted": p, "measured": v, "rel_error": err})
    n_ok = int((reqs["status"] == "ok").sum()) if len(reqs) else 0
    note = None
    if run is None:
        note = (f"this store has no layout event for recommendation {rec_id} (does the server "
                f"record into it? gpuprobe serve --store); counting every server's requests")
    if not len(reqs):
        note = (f"no request has reached {rec.applied_target} on layout {rec.layout} "
                f"since the switch; send traffic (gpuprobe replay) and check again"
                + (f". Also: {note}" if note else ""))
    return {"id": rec.id, "layout": rec.layout, "applied_s": rec.applied_s,
            "applied_target": rec.applied_target, "num_requests": int(len(reqs)),
            "num_ok": n_ok, "slo": {"ttft_s": ttft_s, "tbt_s": tbt_s}, "metrics": rows,
            "note": note}


def _switched_run(store, rec: Recommendation) -> tuple[str, str, float | None] | None:
    """(run_id, host, the start of that server's next switch or None) for the server whose
    layout event names this recommendation; None when the store holds no such event."""
    applied_s = rec.applied_s
    ev = store.layout_events(since_s=applied_s - 3600.0)
    if not len(ev):
        return None
    mine = ev[(ev["reason"] == f"recommendation {rec.id}") & (ev["status"] == "ok")
              & (ev["to_layout"] == rec.layout)]
    if not len(mine):
        return None
    run_id, host = str(mine["run_id"].iloc[-1]), str(mine["host"].iloc[-1])
    later = ev[(ev["run_id"] == run_id) & (ev["host"] == host) & (ev["ts_s"] > applied_s)]
    return run_id, host, (float(later["ts_s"].min()) if len(later) else None)


def predicted_metrics(rec: Recommendation) -> dict:
    """The chosen candidate's predicted metrics: the candidate row of the recommendation's
    own unit, else the first of its layout."""
    cands = [c for c in rec.candidates if c.get("layout") == rec.layout]
    same = [c for c in cands if _unit(c) == rec.deployment.unit]
    pick = (same or cands or [None])[0]
    if pick is None:
        return {}
    return {**pick, **(pick.get("predicted") or {}), **(pick.get("metrics") or {})}


def _unit(row: dict) -> Candidate | None:
    try:
        return Candidate.from_dict(row)
    except (TypeError, ValueError, KeyError):
        return None


def _num(v) -> float | None:
    if isinstance(v, (int, float, np.floating)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def check_text(result: dict) -> str:
    """The check as lines for the terminal."""
    lines = [f"recommendation {result['id']} ({result['layout']}), applied to "
             f"{result['applied_target']}: {result['num_requests']} requests measured since "
             f"the switch ({result['num_ok']} ok); SLO TTFT {result['slo']['ttft_s']:g} s, "
             f"TBT {result['slo']['tbt_s']:g} s",
             f"{'metric':<16}{'predicted':>12}{'measured':>12}{'error':>9}"]
    for r in result["metrics"]:
        def f(v):
            return f"{v:12.4g}" if v is not None else f"{'-':>12}"
        err = f"{r['rel_error']:+9.0%}" if r["rel_error"] is not None else f"{'-':>9}"
        lines.append(f"{r['metric']:<16}{f(r['predicted'])}{f(r['measured'])}{err}")
    if result["note"]:
        lines.append(result["note"])
    return "\n".join(lines)
