"""The coming load as a workload: `recommend --forecast` and the autopilot weigh the layouts
on what the forecaster expects, not on what was.

forecast: gpuprobe.forecast.forecast_workload()'s dict, whose `series` holds
requests_per_s, prefill_tokens_per_s and decode_tokens_per_s, each {model, t_s, mean,
lo80, hi80, lo95, hi95} per forecast bucket. Per bucket the rate is the upper 80% bound of
requests/s (plan for the busy side), and the mix the forecast's mean prompt and output
lengths (prefill or decode tokens/s over requests/s). The requests themselves are the
recent workload's, resampled and rescaled to those lengths, so their spread of lengths and
the burst shape of their arrivals carry over.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprobe.errors import UserError
from gpuprobe.units import finite_number

RATE_BOUND = "hi80"
NEEDED = ("requests_per_s", "prefill_tokens_per_s", "decode_tokens_per_s")
MAX_REQUESTS = 10_000_000  # more would not fit in memory, let alone be simulated


def check_forecast(forecast) -> None:
    """UserError naming the first field a forecast (as `gpuprobe forecast --json` prints it,
    perhaps hand-edited) lacks: the three series, each with equally long lists of finite
    t_s, mean and hi80, and a bucket_s above 0 when given."""
    if not isinstance(forecast, dict):
        raise UserError("expected a JSON object with 'series', as `gpuprobe forecast --json` "
                        "prints it")
    series = forecast.get("series")
    if not isinstance(series, dict) or not all(k in series for k in NEEDED):
        raise UserError(f"series: needs {', '.join(NEEDED)}")
    length = None
    for key in NEEDED:
        if not isinstance(series[key], dict):
            raise UserError(f"series.{key}: expected an object with t_s, mean and {RATE_BOUND}")
        for col in ("t_s", "mean", RATE_BOUND):
            v = series[key].get(col)
            if not isinstance(v, list) or not v or not all(finite_number(x) for x in v):
                raise UserError(f"series.{key}.{col}: expected a list of finite numbers")
            if length is not None and len(v) != length:
                raise UserError(f"series.{key}.{col}: {len(v)} values where the others have "
                                f"{length}")
            length = len(v)
    b = forecast.get("bucket_s")
    if b is not None and not (finite_number(b) and b > 0):
        raise UserError(f"bucket_s: expected a number above 0, got {b!r}")


def workload_from_forecast(workload_df: pd.DataFrame, forecast: dict, seed: int = 0,
                           min_requests: int = 200) -> pd.DataFrame:
    """A workload frame (arrival_s, prompt_tokens, output_tokens, bucket; in arrival order) for
    the forecast's horizon, from workload_df (in arrival order, as loaded): per bucket, hi80 requests/s of requests with the forecast mean lengths.
    Arrivals keep the recent workload's gaps (rescaled), so bursts stay bursts. Horizons too
    short for min_requests requests are repeated until they hold that many (the rate and mix
    unchanged), so a goodput search has requests enough to judge attainment."""
    check_forecast(forecast)
    series = forecast["series"]
    if workload_df.empty:
        raise UserError("workload is empty: nothing to resample the forecast's requests from")
    bucket_s = float(forecast.get("bucket_s") or _step(series["requests_per_s"]["t_s"]))
    rps = np.maximum(np.asarray(series["requests_per_s"][RATE_BOUND], dtype=float), 0.0)
    mean_rps = np.maximum(np.asarray(series["requests_per_s"]["mean"], dtype=float), 1e-9)
    pre = np.maximum(np.asarray(series["prefill_tokens_per_s"]["mean"], dtype=float), 0.0)
    dec = np.maximum(np.asarray(series["decode_tokens_per_s"]["mean"], dtype=float), 0.0)
    rng = np.random.default_rng(seed)
    src = workload_df  # in arrival order (as_workload): its gaps are the bursts kept
    gaps = np.diff(src["arrival_s"].to_numpy(dtype=float))
    gaps = gaps if len(gaps) and gaps.sum() > 0 else np.ones(1)
    counts = np.round(rps * bucket_s).astype(int)
    if counts.sum() == 0:
        raise UserError("the forecast expects no requests in its horizon")
    if counts.sum() > MAX_REQUESTS:
        raise UserError(f"the forecast expects {counts.sum():,} requests in its horizon, more "
                        f"than the {MAX_REQUESTS:,} a search can weigh: use a shorter --horizon")
    reps = max(1, int(np.ceil(min_requests / counts.sum())))
    parts, t0 = [], 0.0
    for _ in range(reps):
        for k, n in enumerate(counts):
            if n == 0:
                t0 += bucket_s
                continue
            g = rng.choice(gaps, n)
            arr = t0 + np.cumsum(g) / g.sum() * bucket_s * (n - 1) / n if n > 1 else np.array([t0])
            pick = src.iloc[rng.integers(0, len(src), n)]
            p, o = pick["prompt_tokens"].to_numpy(float), pick["output_tokens"].to_numpy(float)
            p *= (pre[k] / mean_rps[k]) / max(p.mean(), 1e-9)
            o *= (dec[k] / mean_rps[k]) / max(o.mean(), 1e-9)
            parts.append(pd.DataFrame({"arrival_s": arr, "prompt_tokens": np.maximum(np.round(p), 1),
                                       "output_tokens": np.maximum(np.round(o), 1), "bucket": k}))
            t0 += bucket_s
    out = pd.concat(parts, ignore_index=True).astype({"prompt_tokens": np.int64,
                                                       "output_tokens": np.int64})
    out.attrs["gpuprobe_scaled"] = {"forecast": True, "rate_bound": RATE_BOUND,
                                    "bucket_s": bucket_s, "repeats": reps}
    return out


def forecast_mix(forecast: dict) -> pd.DataFrame:
    """Per forecast bucket: t_s, requests_per_s (hi80), prefill and decode tokens/s (mean) and
    the prompt:output ratio, for `recommend --forecast`'s table of when the mix moves."""
    s = forecast["series"]
    df = pd.DataFrame({"t_s": s["requests_per_s"]["t_s"],
                       "requests_per_s_hi80": s["requests_per_s"][RATE_BOUND],
                       "prefill_tokens_per_s": s["prefill_tokens_per_s"]["mean"],
                       "decode_tokens_per_s": s["decode_tokens_per_s"]["mean"]})
    df["prompt_output_ratio"] = df["prefill_tokens_per_s"] / df["decode_tokens_per_s"].replace(0, np.nan)
    return df


def _step(t_s) -> float:
    t = np.asarray(t_s, dtype=float)
    return float(np.median(np.diff(t))) if len(t) > 1 else 60.0
