"""Finding a season in the data (never assumed): the first high peak of the autocorrelation
(of the detrended series) that stands well above the dip before it; the scan covers lags up to
half the history, so a season found has at least two periods of data."""
from __future__ import annotations

import numpy as np

MIN_ACF = 0.2
MIN_RISE = 0.2  # a season's peak stands this far above the dip before it (a slow drift has no dip)
MIN_PERIOD = 2
MAX_SCAN = 50_000  # buckets of recent history the autocorrelation is computed on


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
    return lag, f"season of {lag} buckets found (autocorrelation {level:.2f})"
