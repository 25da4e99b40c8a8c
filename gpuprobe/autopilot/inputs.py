"""The autopilot's inputs, behind one adapter: the SLO, the window it reads, the forecast of
the next interval as a workload frame, and the candidates' predictions.

Predictions come from the recommender (`gpuprobe.decide`). `--candidates all` runs the one
decision call (decide.decision.run_decision, stored like recommend's): every candidate's
goodput found by its rate-scale search, ranked by its one rule, with reasons and
confidence; seconds per call, and it needs a window of many requests (on a window
of ten, the search finds no rate at which cross misses and calls its goodput infinite).
`--candidates window` is for intervals of seconds: the three layouts the reference server
switches between at their defaults (monolithic prefill-first, intra 50% prefill, cross 1P1D;
recommend's full search also proposes xPyD, which the server runs on its given workers),
each predicted at the window's own rate (decide.predict), the ones meeting the SLO
(metrics.meets_slo) ranked by that offered goodput per device with recommend's rank(). The
forecaster (`gpuprobe.forecast`) fits the history; where it declines (too little of it), or
without history, the last window stands for the next interval (a persistence forecast), and
the audit log says which one ran (`forecast.source`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprobe.decide.slo import parse_slo  # noqa: F401 - the autopilot's --slo is recommend's
from gpuprobe.errors import UserError

MODES = ("all", "window")


# What a layout serves: requests served, still in flight or waiting, and turned away for
# overload (429: demand the layout could not take). Not those refused as malformed or too long
# for the context (400: no layout serves them; the audit log counts them), nor failed ones.
LOAD_STATUSES = ("ok", "in_flight", "http_429")


def window_workload(requests: pd.DataFrame) -> pd.DataFrame:
    """The window's requests (outcome.recent_window, or the server's rows) -> a workload frame
    of their load (LOAD_STATUSES): arrival_s from the first, lengths."""
    df = requests[requests["status"].fillna("ok").isin(LOAD_STATUSES)] if "status" in requests \
        else requests
    df = df.dropna(subset=["prompt_tokens"]).sort_values("arrival_s")
    t0 = float(df["arrival_s"].iloc[0]) if len(df) else 0.0
    return pd.DataFrame({"arrival_s": df["arrival_s"].to_numpy(float) - t0,
                         "prompt_tokens": df["prompt_tokens"].to_numpy(np.int64),
                         "output_tokens": np.maximum(df["output_tokens"].fillna(1).to_numpy(np.int64), 1)})


def forecast_next(window_df: pd.DataFrame, window_s: float, horizon_s: float,
                  history_df: pd.DataFrame | None = None, bucket_s: float | None = None
                  ) -> tuple[pd.DataFrame, dict]:
    """(the next interval's workload frame, a summary of the forecast for the audit log).
    history_df: the longer past the forecaster fits on (None: persistence, the window as the
    next interval); bucket_s: its bucket (default: a sixth of the window)."""
    summary = {"window_s": window_s, "horizon_s": horizon_s, "window_requests": len(window_df),
               "requests_per_s": len(window_df) / window_s,
               "prefill_tokens_per_s": float(window_df["prompt_tokens"].sum()) / window_s,
               "decode_tokens_per_s": float(window_df["output_tokens"].sum()) / window_s}
    note = "persistence (the last window as the next interval)"
    if history_df is not None and len(history_df):
        from gpuprobe.decide.forecast_workload import workload_from_forecast
        from gpuprobe.forecast import forecast_workload
        try:
            f = forecast_workload(history_df, bucket_s=bucket_s or max(window_s / 6.0, 0.5),
                                  horizon_s=horizon_s)
            wl = workload_from_forecast(history_df, f)
        except UserError as exc:  # too little history, a constant series: persistence, and why
            note = f"{note}; the forecaster declined: {exc}"
        else:
            summary.update(source="gpuprobe.forecast", forecast=_forecast_means(f),
                           models={k: v.get("model") for k, v in (f.get("series") or {}).items()})
            return wl, summary
    summary.update(source=note)
    return window_df, summary


def _forecast_means(f: dict) -> dict:
    return {name: float(np.mean(s["mean"])) if len(s.get("mean", [])) else None
            for name, s in (f.get("series") or {}).items()}


def predict(workload_df: pd.DataFrame, profile, slo, mode: str = "all", devices: int = 2,
            store=None) -> dict:
    """{layout, params, candidates (best first, each with max_goodput_rps_per_device), source,
    id (mode all: the recommendation stored in `store`, so apply and check can find it),
    overloaded}. Where no candidate meets the SLO (overload) they rank by SLO attainment at
    the window's load: overload is a reason to act, not to hold."""
    if mode == "all":
        from gpuprobe.decide.decision import DecisionOptions, run_decision
        try:
            rec = run_decision(workload_df, profile, slo, DecisionOptions(max_devices=devices),
                               store)
        except UserError as exc:  # no rate meets the SLO: overload, ranked at the window's load
            out = predict(workload_df, profile, slo, "window", devices)
            return {**out, "source": f"{out['source']} (recommend: {exc})"}
        return {"layout": rec.layout, "params": rec.deployment.params(),
                "candidates": list(rec.candidates), "source": "recommend", "id": rec.id}
    from gpuprobe.decide.candidates import Candidate, at_profile_tp
    from gpuprobe.decide.predict import predict as predict_one
    from gpuprobe.decide.rank import rank
    from gpuprobe.perf.metrics import meets_slo
    from gpuprobe.workloads.loading import as_workload

    wl, rows = as_workload(workload_df), []
    for c in (Candidate("monolithic"), Candidate("intra", prefill_share=0.5), Candidate("cross")):
        c = at_profile_tp(c, profile)
        s = predict_one(wl, profile, c, slo, 1.0, 0)
        ok = meets_slo(s, slo)
        rows.append({"label": c.label, "layout": c.layout, "params": c.params, "devices": c.devices,
                     "meets_slo": ok, "slo_attainment": s.get("slo_attainment"),
                     "offered_goodput_rps_per_device": s.get("offered_goodput_rps_per_device"),
                     # what rank() orders by: the offered goodput where the SLO is met
                     "max_goodput_rps_per_device": s.get("offered_goodput_rps_per_device") if ok else 0.0,
                     "ttft_p99_s": s.get("ttft_p99_s"), "tbt_p99_s": s.get("tbt_p99_s"),
                     "simplicity": list(c.simplicity)})
    ranked, source = rank(rows), "the three default layouts at the window's rate, ranked by rank()"
    if not ranked[0]["meets_slo"]:
        # None meets the SLO at the offered load: overload, which a better layout may relieve,
        # so they rank by SLO attainment there (the policy's gain then counts attainment).
        ranked = sorted(rows, key=lambda r: (-(r["slo_attainment"] or 0.0), r["simplicity"]))
        source = ("the three default layouts at the window's rate; none meets the SLO there "
                  "(overload): ranked by SLO attainment")
    return {"layout": ranked[0]["layout"], "params": ranked[0]["params"], "candidates": ranked,
            "source": source, "overloaded": not ranked[0]["meets_slo"]}
