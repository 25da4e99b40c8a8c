"""The forecasts a user would otherwise make: last value, moving averages (3, 6, 12 buckets),
seasonal naive; plus a moving median, which is what minimises absolute error on bursty series
(the median, not the mean, is the MAE-optimal point forecast)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuprobe.forecast.candidate import Candidate, flat

BASELINE_WINDOWS = (3, 6, 12)


@dataclass
class Baseline(Candidate):
    """A rule with nothing to fit, which a model must beat to be chosen."""
    kind: str = "baseline"


@dataclass
class Last(Baseline):
    name: str = "last"

    def paths(self, y, start, origins, horizon):
        return flat(y[origins - 1], horizon)


@dataclass
class MovingAverage(Baseline):
    window: int = 3
    NAME = "ma{window}"

    def paths(self, y, start, origins, horizon):
        c = np.concatenate([[0.0], np.cumsum(y)])
        lo = np.maximum(origins - self.window, 0)
        return flat((c[origins] - c[lo]) / (origins - lo), horizon)


@dataclass
class MovingMedian(Candidate):
    window: int = 24
    NAME = "median{window}"

    def paths(self, y, start, origins, horizon):
        from numpy.lib.stride_tricks import sliding_window_view
        w = min(self.window, int(origins.min()))
        windows = sliding_window_view(y, w)  # windows[i] = y[i : i + w]
        return flat(np.median(windows[origins - w], axis=1), horizon)


@dataclass
class SeasonalNaive(Baseline):
    period: int = 0
    NAME = "seasonal_naive({period})"

    def paths(self, y, start, origins, horizon):
        h = np.arange(horizon)
        back = self.period * (h // self.period + 1)  # the same phase one (or more) periods ago
        return y[origins[:, None] + h[None, :] - back[None, :]]


def baselines(period: int | None) -> list[Candidate]:
    out = [Last(), *(MovingAverage(window=w) for w in BASELINE_WINDOWS)]
    if period:
        out.append(SeasonalNaive(period=period))
    return out
