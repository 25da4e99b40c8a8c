"""The forecast on what a running deployment recorded: the requests a reference server or the
tap wrote to the store, else the agent's engine token rates, else (rates_frame) a Prometheus's.

Times are seconds from the window's start (`window_start_s`, epoch, in the result); the origin
is the last whole bucket before now.
"""
from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd

from gpuprobe.errors import UserError
from gpuprobe.forecast.series import full_name
from gpuprobe.forecast.workload import DEFAULT_SERIES, forecast_frame, forecast_workload

SOURCES = ("server", "tap")
RATES = {"prefill_tokens_per_s": "prompt_tokens_per_s", "decode_tokens_per_s": "generation_tokens_per_s",
         "requests_per_s": "requests_finished_per_s"}


def forecast_live(store, window_s: float = 3600.0, bucket_s: float = 10.0, horizon_s: float = 60.0,
                  series=DEFAULT_SERIES, now_s: float | None = None, progress=None) -> dict:
    now = time.time() if now_s is None else now_s
    start = now - window_s
    as_of = math.floor(window_s / bucket_s) * bucket_s
    req = store.requests(since_s=start)
    req = req[req["source"].isin(SOURCES) & (req["status"] == "ok")]
    names = [full_name(s) for s in ([series] if isinstance(series, str) else series)]
    if len(req):
        df = pd.DataFrame({"arrival_s": req["arrival_s"].to_numpy(float) - start,
                           "prompt_tokens": req["prompt_tokens"], "output_tokens": req["output_tokens"]})
        out = forecast_workload(df, bucket_s, horizon_s, as_of, names, progress)
        out["source"] = f"{len(req)} requests the server or tap recorded"
    else:
        frame = engine_frame(store, start, as_of, bucket_s)
        if frame is None:
            raise UserError(f"no requests (server or tap) and no engine token rates (agent) in the store "
                            f"in the last {window_s:g} s: run `gpuprobe serve --store STORE` or "
                            f"`gpuprobe agent --scrape URL`")
        out = forecast_frame(frame, bucket_s, horizon_s, as_of, names,
                             ["from the agent's engine rates: requests/s counts finished requests"], progress)
        out["source"] = "the agent's engine token rates"
    out["window_start_s"] = start
    return out


def engine_frame(store, start_s: float, as_of_s: float, bucket_s: float) -> pd.DataFrame | None:
    """Bucket means of the agent's engine rates (summed over engines), or None without them."""
    n = int(round(as_of_s / bucket_s))
    cols = {}
    for col, metric in RATES.items():
        s = store.samples(metric, start_s, start_s + as_of_s, source="engine")
        if s.empty:
            continue
        b = np.floor((s["ts_s"].to_numpy(float) - start_s) / bucket_s).astype(np.int64).clip(0, n - 1)
        per_engine = s.assign(b=b).groupby(["b", "device"])["value"].mean().groupby("b").sum()
        cols[col] = per_engine.reindex(range(n)).to_numpy()
    if "prefill_tokens_per_s" not in cols or "decode_tokens_per_s" not in cols:
        return None
    return rates_frame(pd.DataFrame({"start_s": np.arange(n) * bucket_s, **cols}))


def rates_frame(rates: pd.DataFrame) -> pd.DataFrame:
    """series.py's bucket columns from per-bucket rates (start_s, prefill_tokens_per_s,
    decode_tokens_per_s[, requests_per_s]); a bucket without data counts as idle."""
    df = rates.copy()
    for c in ("prefill_tokens_per_s", "decode_tokens_per_s", "requests_per_s"):
        df[c] = df[c].fillna(0.0) if c in df else 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        r = df["requests_per_s"].where(df["requests_per_s"] > 0)
        tok = df["prefill_tokens_per_s"] + df["decode_tokens_per_s"]
        df["mean_prompt_tokens"] = df["prefill_tokens_per_s"] / r
        df["mean_output_tokens"] = df["decode_tokens_per_s"] / r
        df["prefill_token_share"] = df["prefill_tokens_per_s"] / tok.where(tok > 0)
    return df[["start_s", "requests_per_s", "prefill_tokens_per_s", "decode_tokens_per_s",
               "mean_prompt_tokens", "mean_output_tokens", "prefill_token_share"]]
