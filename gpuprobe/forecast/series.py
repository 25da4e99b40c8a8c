"""Bucketed series of a workload, cut at a forecast origin.

Same convention as `analyze`'s buckets frame: bucket k covers [k * bucket_s, (k + 1) * bucket_s)
in seconds from the workload's first request, and a value is the tokens (or requests) of the
requests *arriving* in it divided by bucket_s. Built with bincount rather than analyze()'s
groupby because four weeks of requests (millions) must bucket in well under a second, and
analyze's per-bucket quantiles are not needed here; a test checks both agree.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from gpuprobe.errors import UserError
from gpuprobe.units import whole_buckets

# Names a caller may ask for (short or full) -> the full name used in results and the store.
SERIES_NAMES = {
    "prefill": "prefill_tokens_per_s", "decode": "decode_tokens_per_s", "requests": "requests_per_s",
    "prompt_length": "mean_prompt_tokens", "output_length": "mean_output_tokens",
    "share": "prefill_token_share",
}
FULL_NAMES = set(SERIES_NAMES.values())
MAX_BUCKETS = 200_000  # four weeks at 10 s is 241,920: past this, bucketing and fitting run long


def full_name(name: str) -> str:
    """'prefill' or 'prefill_tokens_per_s' -> 'prefill_tokens_per_s'; UserError otherwise."""
    if name in FULL_NAMES:
        return name
    if name in SERIES_NAMES:
        return SERIES_NAMES[name]
    raise UserError(f"--series: {name!r} is not one of {', '.join(SERIES_NAMES)}")


def origin(df: pd.DataFrame, bucket_s: float, as_of_s: float | None) -> tuple[float, list[str]]:
    """The forecast origin in seconds, on a bucket boundary, and notes about how it was chosen.
    Default: the end of the last whole bucket, the last one the workload covers to its end (a
    bucket holding the last request is cut short there: its rate over the whole bucket would read
    low). A workload shorter than one bucket keeps that one bucket, with a note. An off-boundary
    as_of rounds down."""
    notes = []
    if as_of_s is None:
        last = float(df["arrival_s"].max()) if len(df) else 0.0
        whole = whole_buckets(last, bucket_s)
        if whole == 0:
            notes.append(f"the workload spans {last:g} s, less than one {bucket_s:g} s bucket: its one "
                         f"bucket is partial and reads low")
            return bucket_s, notes
        if whole * bucket_s < last:
            notes.append(f"history ends at the last whole bucket ({whole * bucket_s:g} s); the "
                         f"{last - whole * bucket_s:.3g} s after it are left out")
        return whole * bucket_s, notes
    if as_of_s < 0 or not math.isfinite(as_of_s):
        raise UserError(f"--as-of: {as_of_s:g} s must be a finite time of at least 0 s from the workload's start")
    k = math.floor(as_of_s / bucket_s + 1e-9)
    if abs(k * bucket_s - as_of_s) > 1e-9 * max(1.0, as_of_s):
        notes.append(f"as_of {as_of_s:g} s is not on a {bucket_s:g} s bucket boundary: rounded down to {k * bucket_s:g} s")
    return k * bucket_s, notes


def bucket_series(df: pd.DataFrame, bucket_s: float, as_of_s: float) -> pd.DataFrame:
    """One row per bucket in [0, as_of_s): start_s, requests_per_s, prefill_tokens_per_s,
    decode_tokens_per_s, mean_prompt_tokens, mean_output_tokens, prefill_token_share (the last
    three NaN where a bucket has no requests). Requests at or after as_of_s are not used."""
    n = int(round(as_of_s / bucket_s))
    if n > MAX_BUCKETS:
        raise UserError(f"--bucket: {bucket_s:g} s cuts {as_of_s:,.0f} s of history into {n:,} buckets, more than "
                        f"{MAX_BUCKETS:,}; use a larger --bucket or an earlier --as-of")
    t = df["arrival_s"].to_numpy(dtype=float)
    keep = (t >= 0) & (t < as_of_s)
    b = np.floor(t[keep] / bucket_s).astype(np.int64)
    b = np.minimum(b, max(n - 1, 0))  # float rounding at the cut must not make bucket n
    count = np.bincount(b, minlength=n).astype(float)
    prompt = np.bincount(b, df["prompt_tokens"].to_numpy(dtype=float)[keep], minlength=n)
    output = np.bincount(b, df["output_tokens"].to_numpy(dtype=float)[keep], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        frame = pd.DataFrame({
            "start_s": np.arange(n, dtype=float) * bucket_s,
            "requests_per_s": count / bucket_s,
            "prefill_tokens_per_s": prompt / bucket_s,
            "decode_tokens_per_s": output / bucket_s,
            "mean_prompt_tokens": np.where(count > 0, prompt / count, np.nan),
            "mean_output_tokens": np.where(count > 0, output / count, np.nan),
            "prefill_token_share": np.where(prompt + output > 0, prompt / (prompt + output), np.nan)})
    return frame


def model_values(frame: pd.DataFrame, name: str) -> tuple[np.ndarray, list[str]]:
    """The values a model sees: ratios (NaN in empty buckets) carry the last known value
    forward, since an empty bucket says nothing about lengths; notes say so."""
    y = frame[name].to_numpy(dtype=float)
    notes = []
    missing = np.isnan(y)
    if missing.any():
        filled = pd.Series(y).ffill().bfill().to_numpy()
        notes.append(f"{int(missing.sum())} empty bucket(s) carry the last known value forward")
        y = filled
    return y, notes
