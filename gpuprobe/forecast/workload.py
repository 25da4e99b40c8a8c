"""forecast_workload: every asked-for series of a workload, forecast from one origin."""
from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd

from gpuprobe.errors import UserError
from gpuprobe.forecast.choose import forecast_series
from gpuprobe.forecast.series import MAX_BUCKETS, bucket_series, full_name, model_values, origin

DEFAULT_SERIES = ("prefill", "decode", "requests")
SHARE = "prefill_token_share"


def forecast_workload(workload_df: pd.DataFrame, bucket_s: float = 10.0, horizon_s: float = 60.0,
                      as_of_s: float | None = None, series=DEFAULT_SERIES, progress=None) -> dict:
    """Forecast a workload (columns arrival_s in seconds from its first request, prompt_tokens,
    output_tokens) from as_of_s (default: the end of its last bucket), using only the requests
    before it. Returns {"bucket_s", "as_of_s", "horizon_s", "series": {full name: {"model",
    "t_s", "mean", "lo80", "hi80", "lo95", "hi95", "interval", "note", "notes", "period"}},
    "backtest": [one row per series and candidate], "notes": [...]}. `progress`, if given, is
    called with one-line messages as the work goes on."""
    _check(workload_df, bucket_s, horizon_s)
    as_of, notes = origin(workload_df, bucket_s, as_of_s)
    frame = bucket_series(workload_df, bucket_s, as_of)
    names = [full_name(s) for s in ([series] if isinstance(series, str) else series)]
    return forecast_frame(frame, bucket_s, horizon_s, as_of, names, notes, progress)


def forecast_frame(frame: pd.DataFrame, bucket_s: float, horizon_s: float, as_of_s: float,
                   names: list[str], notes: list[str], progress=None) -> dict:
    """The same from an already bucketed frame (one row per bucket up to as_of_s; series.py's
    columns): the live source comes in this way."""
    horizon = max(1, math.ceil(horizon_s / bucket_s - 1e-9))
    if horizon > MAX_BUCKETS:  # 100 days at 1 s ran for hours, printing and storing each bucket
        raise UserError(f"--horizon: {horizon_s:g} s is {horizon:,} buckets of {bucket_s:g} s, more "
                        f"than {MAX_BUCKETS:,}; use a larger --bucket or a shorter --horizon")
    if horizon * bucket_s != horizon_s:
        notes.append(f"horizon {horizon_s:g} s is not a whole number of {bucket_s:g} s buckets: "
                     f"forecasting {horizon} bucket(s)")
    if len(frame) and not frame["requests_per_s"].any():
        notes.append("no requests before the origin")
    out = {"bucket_s": bucket_s, "as_of_s": as_of_s, "horizon_s": horizon * bucket_s,
           "series": {}, "backtest": [], "notes": notes}
    t_s = [as_of_s + k * bucket_s for k in range(horizon)]
    for name in dict.fromkeys(names):
        t0 = time.perf_counter()
        y, fill_notes = model_values(frame, name) if len(frame) else (np.zeros(0), [])
        step = (lambda msg, n=name: progress(f"{n}: {msg}")) if progress else None
        res = forecast_series(y, horizon, nonneg=True, upper=1.0 if name == SHARE else None, progress=step)
        if fill_notes:
            res["notes"] = fill_notes + res["notes"]
            res["note"] = "; ".join(fill_notes + [res["note"]])
        res["seconds"] = time.perf_counter() - t0
        out["backtest"] += [{"series": name, **row} for row in res.pop("backtest")]
        out["series"][name] = {"t_s": t_s, **res}
    return out


def _check(df: pd.DataFrame, bucket_s: float, horizon_s: float) -> None:
    missing = [c for c in ("arrival_s", "prompt_tokens", "output_tokens") if c not in df.columns]
    if missing:
        raise UserError(f"workload: missing column(s) {', '.join(missing)}")
    if not (bucket_s > 0 and math.isfinite(bucket_s)):
        raise UserError(f"--bucket: {bucket_s:g} s must be more than 0")
    if not (horizon_s > 0 and math.isfinite(horizon_s)):
        raise UserError(f"--horizon: {horizon_s:g} s must be more than 0")
