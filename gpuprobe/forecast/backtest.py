"""Scoring a candidate's rolling-origin forecasts and calibrating its intervals on them.

errors[i, h] = actual - forecast for origin i and step h. Conformal intervals add per-step
quantiles of those errors to the point forecast; their coverage is reported honestly by taking
the quantiles from the earlier half of the origins and counting hits on the later half.
"""
from __future__ import annotations

import numpy as np

LEVELS = ((0.10, 0.90), (0.025, 0.975))  # 80% and 95% two-sided, as lo/hi quantiles


def errors(y: np.ndarray, forecasts: np.ndarray, origins: np.ndarray) -> np.ndarray:
    """[len(origins), horizon] actual minus forecast (origins must leave room for the horizon)."""
    horizon = forecasts.shape[1]
    actual = y[origins[:, None] + np.arange(horizon)[None, :]]
    return actual - forecasts


def naive_scale(y: np.ndarray) -> float:
    """MASE's denominator: the mean absolute one-step change of the history (0 -> NaN MASE)."""
    return float(np.mean(np.abs(np.diff(y)))) if len(y) > 1 else 0.0


def conformal_offsets(err: np.ndarray) -> np.ndarray:
    """[4, horizon]: lo80, hi80, lo95, hi95 offsets from the point forecast, per step, from
    the error quantiles (finite-sample corrected, so n errors give at least the nominal cover)."""
    n = err.shape[0]
    rows = []
    for lo, hi in LEVELS:
        qlo = max(0.0, (np.floor((n + 1) * lo) - 1) / max(n - 1, 1))
        qhi = min(1.0, np.ceil((n + 1) * hi - 1) / max(n - 1, 1))
        rows += [np.quantile(err, qlo, axis=0), np.quantile(err, qhi, axis=0)]
    return np.vstack(rows)


def coverage(err: np.ndarray, offsets: np.ndarray) -> tuple[float, float]:
    """Share of errors inside [lo, hi] at 80% and at 95% (offsets as conformal_offsets gives)."""
    c80 = np.mean((err >= offsets[0]) & (err <= offsets[1]))
    c95 = np.mean((err >= offsets[2]) & (err <= offsets[3]))
    return float(c80), float(c95)


def split_coverage(err: np.ndarray) -> tuple[float, float]:
    """Coverage of conformal intervals fitted on the first half of the origins, counted on the
    second half; NaN when there are too few origins to split."""
    n = err.shape[0]
    if n < 10:
        return float("nan"), float("nan")
    return coverage(err[n // 2:], conformal_offsets(err[: n // 2]))


def score(err: np.ndarray, scale: float, own: np.ndarray | None) -> dict:
    """MAE, MASE and interval coverage (own intervals where the model has them, conformal)."""
    mae = float(np.mean(np.abs(err)))
    own80, own95 = coverage(err, own) if own is not None else (None, None)
    conf80, conf95 = split_coverage(err)
    return {"mae": mae, "mase": mae / scale if scale > 0 else None,
            "own_coverage80": own80, "own_coverage95": own95,
            "coverage80": conf80, "coverage95": conf95, "origins": int(err.shape[0])}
