"""Judging the forecaster from outside, as the issue's bars do: forecast from many origins with
--as-of (so each forecast sees only the data before it) and compare with what came, and with the
baselines a user would otherwise use at the same origins.

    rows = evaluate(df, bucket_s=10, horizon_s=60, origins_s=[...], series=("prefill", "decode"))
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprobe.forecast.series import bucket_series, full_name
from gpuprobe.forecast.workload import forecast_frame

NONSEASONAL = ("last", "ma3", "ma6", "ma12")


def second_half_origins(df: pd.DataFrame, bucket_s: float, horizon_s: float, stride_s: float) -> list[float]:
    """Origins (s) every stride_s from the middle of the workload to the last full horizon."""
    end = np.floor(float(df["arrival_s"].max()) / bucket_s) * bucket_s  # the last full bucket's end
    first = np.ceil(end / 2 / bucket_s) * bucket_s
    return [float(t) for t in np.arange(first, end - horizon_s + 1e-9, stride_s)]


def baseline_forecasts(y: np.ndarray, k: int, horizon: int, period: int | None) -> dict:
    """The baselines' forecasts from origin k (bucket index) over the horizon."""
    out = {"last": np.full(horizon, y[k - 1])}
    for w in (3, 6, 12):
        out[f"ma{w}"] = np.full(horizon, y[max(0, k - w):k].mean())
    if period and k >= period:
        h = np.arange(horizon)
        out["seasonal_naive"] = y[k + h - period * (h // period + 1)]
    return out


def evaluate(df: pd.DataFrame, bucket_s: float, horizon_s: float, origins_s, series=("prefill", "decode"),
             period: int | None = None, progress=None) -> pd.DataFrame:
    """One row per series: MAE of the chosen forecasts and of each baseline over all origins and
    steps, the chosen intervals' 80% and 95% coverage, and which models were chosen how often.
    `period` (buckets) adds the seasonal naive baseline."""
    full = bucket_series(df, bucket_s, (np.floor(df["arrival_s"].max() / bucket_s) + 1) * bucket_s)
    return evaluate_frame(full, bucket_s, horizon_s, origins_s, series, period, progress)


def evaluate_frame(full: pd.DataFrame, bucket_s: float, horizon_s: float, origins_s, series=("prefill", "decode"),
                   period: int | None = None, progress=None) -> pd.DataFrame:
    """evaluate() on an already bucketed frame (series.py's columns, one row per bucket): the
    forecast from origin t sees full's rows before t only, exactly what --as-of t sees."""
    names = [full_name(s) for s in series]
    horizon = int(round(horizon_s / bucket_s))
    acc = {n: {"abs": [], "in80": [], "in95": [], "models": {}, **{b: [] for b in (*NONSEASONAL, "seasonal_naive")}}
           for n in names}
    for i, t in enumerate(origins_s):
        k = int(round(t / bucket_s))
        res = forecast_frame(full.iloc[:k].reset_index(drop=True), bucket_s, horizon_s, k * bucket_s, names, [])
        for n in names:
            y = full[n].to_numpy()
            actual = y[k:k + horizon]
            s = res["series"][n]
            mean, lo80, hi80 = (np.asarray(s[c])[:len(actual)] for c in ("mean", "lo80", "hi80"))
            lo95, hi95 = (np.asarray(s[c])[:len(actual)] for c in ("lo95", "hi95"))
            a = acc[n]
            a["abs"] += list(np.abs(actual - mean))
            a["in80"] += list((actual >= lo80) & (actual <= hi80))
            a["in95"] += list((actual >= lo95) & (actual <= hi95))
            a["models"][s["model"]] = a["models"].get(s["model"], 0) + 1
            for b, f in baseline_forecasts(y, k, horizon, period).items():
                a[b] += list(np.abs(actual - f[:len(actual)]))
        if progress:
            progress(f"origin {i + 1}/{len(origins_s)}")
    rows = []
    for n, a in acc.items():
        base = {b: float(np.mean(a[b])) for b in NONSEASONAL}
        best = min(base, key=base.get)
        row = {"series": n, "origins": len(origins_s), "mae": float(np.mean(a["abs"])), **{f"mae_{b}": v for b, v in base.items()},
               "best_baseline": best, "ratio_to_best": float(np.mean(a["abs"])) / base[best] if base[best] else float("nan"),
               "coverage80": float(np.mean(a["in80"])), "coverage95": float(np.mean(a["in95"])),
               "models": "; ".join(f"{m} {c}" for m, c in sorted(a["models"].items(), key=lambda x: -x[1]))}
        if a["seasonal_naive"]:
            row["mae_seasonal_naive"] = float(np.mean(a["seasonal_naive"]))
            row["ratio_to_seasonal_naive"] = row["mae"] / row["mae_seasonal_naive"]
        rows.append(row)
    return pd.DataFrame(rows)
