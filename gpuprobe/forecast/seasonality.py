"""Finding a season in the data (never assumed): the first high peak of the autocorrelation
(of the detrended series) that stands well above the dip before it; the scan covers lags up to
half the history, so a season found has at least two periods of data."""
from __future__ import annotations

import numpy as np

MIN_ACF = 0.2
MIN_RISE = 0.2  # a season's peak stands this far above the dip before it (a slow drift has no dip)
MIN_PERIOD = 2
MAX_SCAN = 50_000  # buckets of recent history the autocorrelation is computed on
REFINE_SPAN = 0.05  # the period is refined within +-5% of the autocorrelation's peak,
REFINE_MOVES = 4    # moving the window this many times at most


def autocorrelation(y: np.ndarray) -> np.ndarray:
    """ACF of y minus its straight-line trend, for lags 0 .. len(y) - 1 (via FFT)."""
    n = len(y)
    t = np.arange(n)
    z = y - np.polyval(np.polyfit(t, y, 1), t) if n > 2 else y - y.mean()
    f = np.fft.rfft(z, 2 * n)
    acf = np.fft.irfft(f * np.conj(f))[:n]
    return acf / acf[0] if acf[0] > 0 else np.zeros(n)


def find_period(y: np.ndarray) -> tuple[int | None, str]:
    """(period in buckets or None, a note saying what was found)."""
    y = np.asarray(y, dtype=float)[-MAX_SCAN:]
    n = len(y)
    if n < 4 * MIN_PERIOD or np.ptp(y) == 0:
        return None, f"no seasonality looked for: {n} bucket(s) of history are too few"
    acf = autocorrelation(y)
    half = acf[: n // 2 + 1]
    down = np.flatnonzero(np.diff(half) > 0)  # the first lag where the ACF rises again
    if not len(down):
        return None, "no seasonality found in the autocorrelation"
    first = max(int(down[0]), MIN_PERIOD)
    rise = half[first:] - np.minimum.accumulate(half[first:])  # height above the trough before it
    ok = (half[first:] >= max(MIN_ACF, 3 / np.sqrt(n))) & (rise >= MIN_RISE)
    if not ok.any():
        best = first + int(np.argmax(half[first:]))
        return None, f"no seasonality found (best autocorrelation {half[best]:.2f} at lag {best})"
    peak = float(np.max(half[first:][ok]))
    lag = first + int(np.flatnonzero(ok & (half[first:] >= 0.9 * peak))[0])  # the shortest of near-
    while lag + 1 < len(half) and half[lag + 1] > half[lag]:                 # equal peaks (P, not 2P)
        lag += 1
    level = float(half[lag])
    lag = refine(y, lag)
    return lag, f"season of {lag} buckets found (autocorrelation {level:.2f})"


def refine(y: np.ndarray, lag: int) -> int:
    """The period near `lag` whose per-phase means explain the most variance (adjusted R^2, so
    longer periods' extra means are not rewarded). A smooth cycle's autocorrelation is nearly
    flat around its peak (a day of 1-minute buckets read 1,431 instead of 1,440; noise can stop
    the climb short of the peak), while folding the whole history at a wrong period smears the
    profile over every cycle it spans. The window moves on while the best sits at its edge."""
    n = len(y)
    t = np.arange(n)
    z = y - np.polyval(np.polyfit(t, y, 1), t) if n > 2 else y - y.mean()
    total = float(np.sum(z ** 2))
    if total <= 0:
        return lag
    scores: dict[int, float] = {}

    def fit(p: int) -> float:
        if p not in scores:
            phase = t % p
            explained = float(np.sum(np.bincount(phase, z, p) ** 2 / np.maximum(np.bincount(phase, minlength=p), 1)))
            scores[p] = 1 - (total - explained) / (n - p) / (total / (n - 1))
        return scores[p]

    best = lag
    for _ in range(REFINE_MOVES):
        span = max(1, int(round(best * REFINE_SPAN)))
        lo, hi = max(MIN_PERIOD, best - span), min(n // 2, best + span)
        new = max(range(lo, hi + 1), key=fit)
        if new == best or lo < new < hi:
            return new
        best = new
    return best
