"""Scoring a candidate's rolling-origin forecasts and calibrating intervals on them.

errors[i, h] = actual - forecast for origin i and step h. Intervals are split-conformal on
*scaled* errors: each origin's errors are divided by the series' local spread just before it
(`local_scale`), per-step order statistics of those ratios are taken with the finite-sample
rank (so n exchangeable errors give at least the nominal cover), and the final interval is
those quantiles times the spread now. Load series are heteroscedastic (a busy stretch errs by
more than a quiet one), so unscaled quantiles from a bursty stretch of history come out too
wide for a calm present and too narrow for a burst. Coverage in the backtest table is honest:
quantiles from the earlier half of the origins, hits counted on the later half.
"""
from __future__ import annotations

import numpy as np

LEVELS = ((0.10, 0.90), (0.025, 0.975))  # 80% and 95% two-sided, as lo/hi quantiles
SCALE_WINDOW = 24   # buckets of recent history whose spread scales the errors
SCALE_FLOOR = 0.25  # of the history's own spread: a silent stretch must not scale errors to 0


def errors(y: np.ndarray, forecasts: np.ndarray, origins: np.ndarray) -> np.ndarray:
    """[len(origins), horizon] actual minus forecast (origins must leave room for the horizon)."""
    horizon = forecasts.shape[1]
    actual = y[origins[:, None] + np.arange(horizon)[None, :]]
    return actual - forecasts


def naive_scale(y: np.ndarray) -> float:
    """MASE's denominator: the mean absolute one-step change of the history (0 -> NaN MASE)."""
    return float(np.mean(np.abs(np.diff(y)))) if len(y) > 1 else 0.0


def local_scale(y: np.ndarray, origins: np.ndarray, window: int = SCALE_WINDOW) -> np.ndarray:
    """The mean absolute deviation from the median of y[o - window : o] for each origin o,
    floored at SCALE_FLOOR times that of the history before the first origin."""
    origins = np.asarray(origins)
    history = y[: max(int(origins.min()), 1)]
    floor = SCALE_FLOOR * float(np.mean(np.abs(history - np.median(history))))
    out = np.empty(len(origins))
    for i, o in enumerate(origins):
        seg = y[max(0, o - window):o]
        out[i] = np.mean(np.abs(seg - np.median(seg))) if len(seg) else 0.0
    return np.maximum(out, max(floor, 1e-12))


def conformal_offsets(err: np.ndarray) -> np.ndarray:
    """[4, horizon]: lo80, hi80, lo95, hi95 offsets per step, the split-conformal order
    statistics of n errors: the floor((n + 1) lo)-th smallest and the ceil((n + 1) hi)-th
    (clamped to the sample when n is too small to reach them, which the caller's note says)."""
    n = err.shape[0]
    s = np.sort(err, axis=0)
    rows = []
    for lo, hi in LEVELS:
        k_lo = min(max(int(np.floor((n + 1) * lo)), 1), n) - 1
        k_hi = min(max(int(np.ceil((n + 1) * hi)), 1), n) - 1
        rows += [s[k_lo], s[k_hi]]
    return np.vstack(rows)


def coverage(err: np.ndarray, offsets: np.ndarray) -> tuple[float, float]:
    """Share of errors inside [lo, hi] at 80% and at 95% (offsets as conformal_offsets gives)."""
    c80 = np.mean((err >= offsets[0]) & (err <= offsets[1]))
    c95 = np.mean((err >= offsets[2]) & (err <= offsets[3]))
    return float(c80), float(c95)


def split_coverage(err: np.ndarray, scales: np.ndarray) -> tuple[float, float]:
    """Coverage of scaled conformal intervals fitted on the first half of the origins, counted
    on the second half; NaN when there are too few origins to split."""
    n = err.shape[0]
    if n < 10:
        return float("nan"), float("nan")
    z = err / scales[:, None]
    return coverage(z[n // 2:], conformal_offsets(z[: n // 2]))


def score(err: np.ndarray, scale: float, own: np.ndarray | None, scales: np.ndarray) -> dict:
    """MAE, MASE and interval coverage (own intervals where the model has them, conformal)."""
    mae = float(np.mean(np.abs(err)))
    own80, own95 = coverage(err, own) if own is not None else (None, None)
    conf80, conf95 = split_coverage(err, scales)
    return {"mae": mae, "mase": mae / scale if scale > 0 else None,
            "own_coverage80": own80, "own_coverage95": own95,
            "coverage80": conf80, "coverage95": conf95, "origins": int(err.shape[0])}
