"""Synthetic workloads: arrivals from a Poisson or bursty gamma process, lengths resampled from
a trace, a prefill/decode mix that can shift over time, and an optional daily cycle.

    df = synthesize(rate_rps=2, duration_s=600, arrival="gamma", cv=2, lengths=trace_df,
                    mix_shift=("decode-heavy", "prefill-heavy"), daily_cycle=True, seed=1)

Deterministic for a seed. Gamma gaps have shape 1/cv^2 (cv = 1 is Poisson; cv > 1 bursty).
The daily cycle multiplies the rate by 1 + 0.5 * sin(2 pi t / period - pi/2) (trough at t=0,
peak at half a period), applied by thinning. The mix: each source request has a prefill share
s = prompt / (prompt + output); "decode-heavy" resamples with weight (1 - s)^4, "prefill-heavy"
with s^4, "neutral" uniformly; at time fraction f the request comes from the end mix with
probability f, so the mix moves linearly from the first to the second. With `shift_at_s` it
moves at once instead (START before, END from then on); with `mix_every_s` it alternates,
START for the first period, END for the next, and so on.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprobe.errors import UserError

MIXES = ("neutral", "decode-heavy", "prefill-heavy")
CYCLE_DEPTH = 0.5
MIN_CV, MAX_CV = 0.01, 100.0
MAX_REQUESTS = 10_000_000  # expected requests (rate x duration); more would take gigabytes


def arrivals(rng, rate_rps: float, duration_s: float, arrival: str, cv: float, daily_cycle: bool,
             cycle_period_s: float) -> np.ndarray:
    """Arrival times in [0, duration_s), seconds."""
    peak = rate_rps * (1 + CYCLE_DEPTH) if daily_cycle else rate_rps
    n_guess = int(peak * duration_s * 1.3 + 50)
    if arrival == "poisson":
        gaps = rng.exponential(1.0 / peak, n_guess)
    else:
        shape = 1.0 / cv ** 2
        gaps = rng.gamma(shape, 1.0 / (peak * shape), n_guess)
    t = np.cumsum(gaps)
    while t[-1] < duration_s:  # rare: extend rather than fail
        more = rng.exponential(1.0 / peak, n_guess) if arrival == "poisson" else \
            rng.gamma(1.0 / cv ** 2, cv ** 2 / peak, n_guess)
        t = np.concatenate([t, t[-1] + np.cumsum(more)])
    t = t[t < duration_s]
    if daily_cycle:
        keep = rng.random(t.size) < (1 + CYCLE_DEPTH * np.sin(2 * np.pi * t / cycle_period_s - np.pi / 2)) / (1 + CYCLE_DEPTH)
        t = t[keep]
    return t


def _weights(share: np.ndarray, mix: str) -> np.ndarray:
    w = {"neutral": np.ones_like(share), "decode-heavy": (1 - share) ** 4, "prefill-heavy": share ** 4}[mix]
    return w / w.sum() if w.sum() > 0 else np.full_like(share, 1 / len(share))


def synthesize(rate_rps: float, duration_s: float, lengths: pd.DataFrame, arrival: str = "poisson",
               cv: float = 1.0, mix_shift: tuple[str, str] = ("neutral", "neutral"), daily_cycle: bool = False,
               cycle_period_s: float = 86_400.0, seed: int = 0, shift_at_s: float | None = None,
               mix_every_s: float | None = None) -> pd.DataFrame:
    """A workload DataFrame: arrival_s (s from 0), prompt_tokens, output_tokens."""
    if rate_rps <= 0 or duration_s <= 0:
        raise UserError("--rate and --duration must be more than 0")
    if rate_rps * duration_s > MAX_REQUESTS:
        raise UserError(f"--rate x --duration is about {rate_rps * duration_s:,.0f} requests, more than "
                        f"{MAX_REQUESTS:,}: lower --rate or --duration")
    if not MIN_CV <= cv <= MAX_CV:  # far outside, gamma gaps underflow to 0 or overflow
        raise UserError(f"--cv: {cv:g} is not between {MIN_CV:g} and {MAX_CV:g}")
    if daily_cycle and cycle_period_s <= 0:
        raise UserError("--cycle-period: must be more than 0s")
    if arrival not in ("poisson", "gamma"):
        raise UserError(f"--arrival: {arrival!r} is not poisson or gamma")
    for mix in mix_shift:
        if mix not in MIXES:
            raise UserError(f"--mix-shift: {mix!r} is not one of {', '.join(MIXES)}")
    if shift_at_s is not None and mix_every_s is not None:
        raise UserError("--shift-at and --mix-every: give one of them")
    if (shift_at_s is not None and shift_at_s < 0) or (mix_every_s is not None and mix_every_s <= 0):
        raise UserError("--shift-at must be at least 0s and --mix-every more than 0s")
    if lengths is None or len(lengths) == 0:
        raise UserError("--lengths-from: the length source has no requests")
    rng = np.random.default_rng(seed)
    t = arrivals(rng, rate_rps, duration_s, arrival, cv, daily_cycle, cycle_period_s)
    if not t.size:
        raise UserError("synth produced no requests: raise --rate or --duration")
    p_src = lengths["prompt_tokens"].to_numpy(dtype=np.int64)
    o_src = lengths["output_tokens"].to_numpy(dtype=np.int64)
    share = p_src / np.maximum(p_src + o_src, 1)
    w_start, w_end = _weights(share, mix_shift[0]), _weights(share, mix_shift[1])
    from_end = rng.random(t.size) < t / duration_s
    if shift_at_s is not None:
        from_end = t >= shift_at_s
    elif mix_every_s is not None:
        from_end = (t // mix_every_s).astype(np.int64) % 2 == 1
    pick = np.where(from_end, rng.choice(len(share), t.size, p=w_end), rng.choice(len(share), t.size, p=w_start))
    return pd.DataFrame({"arrival_s": t, "prompt_tokens": p_src[pick], "output_tokens": o_src[pick]})


def parse_mix_shift(text: str | None) -> tuple[str, str]:
    """'decode-heavy:prefill-heavy' -> ('decode-heavy', 'prefill-heavy'); one name means no shift."""
    if not text:
        return ("neutral", "neutral")
    parts = text.split(":")
    if len(parts) > 2:
        raise UserError(f"--mix-shift: {text!r} is not START:END")
    return (parts[0], parts[-1])
