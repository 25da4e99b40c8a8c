"""The four-week daily-cycle workload of the forecast bench, in aggregate form.

It is what `gpuprobe synth --daily-cycle --rate 20 --duration 28d` would give once bucketed:
Poisson arrivals whose rate follows synth's cycle, rate * (1 + 0.5 sin(2 pi t / 1 d - pi / 2)),
each request's lengths resampled from a trace. At 20 req/s that is ~48M requests, past synth's
10M cap (gigabytes as a request list), so the per-minute buckets are drawn directly: a
bucket's request count is Poisson with the rate integrated over the bucket (what thinning a
Poisson process gives), and its token totals are the sums of that many resampled lengths.
20 req/s rather than synth's usual 2: at 2 req/s and 1-minute buckets the per-bucket noise
swamps the cycle (even the true rate curve scores only ~0.87x the best moving average), while
at 20 req/s the true curve scores ~0.54x, so a 0.8x bar tells a seasonal model from a lucky one.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

DAY_S = 86_400.0
CYCLE_DEPTH = 0.5  # synth's


def cycle_frame(lengths: pd.DataFrame, rate_rps: float = 20.0, days: int = 28, bucket_s: float = 60.0,
                seed: int = 0) -> pd.DataFrame:
    """Bucketed series (gpuprobe.forecast.series.bucket_series' columns) of the workload above."""
    rng = np.random.default_rng(seed)
    n = int(round(days * DAY_S / bucket_s))
    edges = np.arange(n + 1) * bucket_s
    # the cycle's rate integrated over each bucket (exact, so any bucket size is right)
    w = 2 * np.pi / DAY_S
    integral = rate_rps * (edges - CYCLE_DEPTH / w * (np.cos(w * edges - np.pi / 2)))
    count = rng.poisson(np.diff(integral))
    p_src = lengths["prompt_tokens"].to_numpy(dtype=float)
    o_src = lengths["output_tokens"].to_numpy(dtype=float)
    prompt, output = np.zeros(n), np.zeros(n)
    day = int(round(DAY_S / bucket_s))
    for lo in range(0, n, day):  # a day at a time keeps memory to a few hundred MB
        c = count[lo:lo + day]
        label = np.repeat(np.arange(len(c)), c)
        pick = rng.integers(0, len(p_src), label.size)
        prompt[lo:lo + day] = np.bincount(label, p_src[pick], minlength=len(c))
        output[lo:lo + day] = np.bincount(label, o_src[pick], minlength=len(c))
    with np.errstate(invalid="ignore", divide="ignore"):
        return pd.DataFrame({
            "start_s": edges[:-1], "requests_per_s": count / bucket_s,
            "prefill_tokens_per_s": prompt / bucket_s, "decode_tokens_per_s": output / bucket_s,
            "mean_prompt_tokens": np.where(count > 0, prompt / count, np.nan),
            "mean_output_tokens": np.where(count > 0, output / count, np.nan),
            "prefill_token_share": np.where(prompt + output > 0, prompt / (prompt + output), np.nan)})
