"""When the best layout is expected to change over a forecast's horizon: the few strongest
candidates of the recommendation, weighed again bucket by bucket on the forecast load."""
from __future__ import annotations

import pandas as pd

from gpuprobe.decide.candidates import Candidate
from gpuprobe.decide.forecast_workload import forecast_mix
from gpuprobe.decide.rank import rank
from gpuprobe.decide.search import search_candidates
from gpuprobe.perf.metrics import Slo

TOP = 4  # the recommendation's best few, plus the best of each other layout


def outlook(forecast_wl: pd.DataFrame, forecast: dict, profile, slo: Slo, rec,
            seed: int | None = 0) -> dict:
    """{'buckets': [{t_s, requests_per_s_hi80, prompt_output_ratio, best}], 'changes':
    [{t_s, from, to}], 'lines': [...]} for forecast_wl (workload_from_forecast's frame, in
    arrival order) and rec, the Recommendation made on it."""
    picks = list(rec.candidates[:TOP])
    for layout in ("monolithic", "intra", "cross"):
        r = next((c for c in rec.candidates if c["layout"] == layout), None)
        if r is not None and r not in picks:
            picks.append(r)
    cands = [Candidate.from_dict(r) for r in picks]
    mix = forecast_mix(forecast)
    rows, changes, prev = [], [], None
    for k, part in forecast_wl.groupby("bucket", sort=True):
        part = part.assign(arrival_s=part["arrival_s"] - part["arrival_s"].iloc[0])
        if len(part) < 20:
            best = prev
        else:
            ranked = rank(search_candidates(part, profile, cands, slo, seed=seed, sample=len(part)))
            best = ranked[0]["label"] if ranked[0]["meets_slo"] else None
        m = mix.iloc[int(k)] if int(k) < len(mix) else None
        rows.append({"t_s": float(m["t_s"]) if m is not None else None,
                     "requests_per_s_hi80": float(m["requests_per_s_hi80"]) if m is not None else None,
                     "prompt_output_ratio": float(m["prompt_output_ratio"]) if m is not None else None,
                     "best": best})
        if prev is not None and best is not None and best != prev:
            changes.append({"t_s": rows[-1]["t_s"], "from": prev, "to": best})
        prev = best if best is not None else prev
    lines = [f"t={r['t_s']:.0f}s load {r['requests_per_s_hi80']:.3g} req/s (hi80), ratio "
             f"{r['prompt_output_ratio']:.2f}:1 -> {r['best'] or 'none meets the SLO'}"
             for r in rows if r["t_s"] is not None]
    lines.append("; ".join(f"best layout expected to change at t={c['t_s']:.0f}s: {c['from']} -> {c['to']}"
                           for c in changes) or "best layout not expected to change over the horizon")
    return {"buckets": rows, "changes": changes, "lines": lines}
