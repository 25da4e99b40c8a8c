"""Measured against predicted: what validate (and repredict) compare, and the bar.

A replay's client records become the same summary the simulator gives (metrics.py); a
layout's replays are summed up by their medians and their range; each COMPARED metric gets
its relative error; issue 6's figure of merit is the median |error| over the P50_METRICS.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprobe.perf.metrics import (
    TBT_TOLERANCE,
    Slo,
    aggregate,
    first_gap_shares,
    gaps_from_token_times,
    per_request,
)
from gpuprobe.sim.layouts import DEVICES

COMPARED = ("ttft_p50_s", "ttft_p99_s", "tbt_p50_s", "tbt_p99_s", "throughput_tok_s")
P50_METRICS = ("ttft_p50_s", "tbt_p50_s", "throughput_tok_s")
BAR = 0.15  # issue 6: every layout's median |rel error| over P50_METRICS at most this


def measured_summary(records: pd.DataFrame, slo: Slo, devices: int) -> dict:
    """Aggregate metrics from replay records, with the simulator's definitions."""
    ok = records["status"] == "ok"
    tt = [list(t) if o else [] for t, o in zip(records["token_times"], ok)]
    arrival = records["arrival_s"].to_numpy(float)
    arrival = arrival - arrival.min()
    first = np.array([a + t[0] if t else np.nan for a, t in zip(arrival, tt)])
    last = np.array([a + t[-1] if t else np.nan for a, t in zip(arrival, tt)])
    n = np.array([len(t) for t in tt])
    req = per_request(arrival, first, last, n)
    return {**aggregate(req, gaps_from_token_times(tt), slo, devices), **first_gap_shares(tt)}


def measured_summaries(probes: dict, layouts, slo: Slo) -> dict[str, list[dict]]:
    """{layout: the measured summary of each of its replays} (probes: LayoutProbe-likes)."""
    return {k: [measured_summary(r, slo, DEVICES[k]) for r in probes[k].replays]
            for k in layouts}


def replay_range(per_replay: dict[str, list[dict]]) -> dict[str, dict[str, list[float] | None]]:
    """{layout: {metric: [min, max] over its replays}}: how far one replay's figure lies from
    another's, the measurement's own precision to read each rel_error against (None with one
    replay or a missing value)."""
    out = {}
    for layout, runs in per_replay.items():
        out[layout] = {}
        for m in COMPARED:
            v = [s.get(m) for s in runs]
            ok = len(v) > 1 and all(isinstance(x, float) and np.isfinite(x) for x in v)
            out[layout][m] = [float(min(v)), float(max(v))] if ok else None
    return out


def compare(predicted: dict[str, dict], measured: dict[str, dict]) -> list[dict]:
    """One row per layout and COMPARED metric: predicted, measured, (p - m) / m."""
    rows = []
    for layout in predicted:
        for m in COMPARED:
            p, q = predicted[layout].get(m), measured[layout].get(m)
            err = (p - q) / q if p is not None and q and np.isfinite(p) and np.isfinite(q) else None
            rows.append({"layout": layout, "metric": m, "predicted": p, "measured": q,
                         "rel_error": err})
    return rows


def median_p50_error(rows: list[dict], layout: str) -> float | None:
    """Median |rel error| of `layout` over the p50 metrics (issue 6's figure of merit)."""
    errs = [abs(r["rel_error"]) for r in rows if r["layout"] == layout
            and r["metric"] in P50_METRICS and r["rel_error"] is not None]
    return float(np.median(errs)) if errs else None


def tbt_tolerance(per_replay: dict[str, list[dict]]) -> float:
    """How far apart two layouts' p99 TBTs must be to count as different: the largest
    spread (max / min - 1) between one layout's own replays, at least TBT_TOLERANCE, at most
    1. Measured here: 9-43% on one run, and 2.1x for one layout on a bursty trace."""
    spans = (r["tbt_p99_s"] for r in replay_range(per_replay).values())
    spread = [hi / lo - 1.0 for lo, hi in filter(None, spans) if lo > 0]
    return float(min(1.0, max([TBT_TOLERANCE, *spread])))
