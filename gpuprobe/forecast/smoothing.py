"""Exponential smoothing candidates (statsmodels ETSModel): simple, damped trend, and simple on
log(1 + y). The log one forecasts the median of a skewed series, which is what a bursty token
series needs for a low absolute error."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuprobe.forecast.candidate import Candidate, flat, level_path
from gpuprobe.forecast.fitting import fit_quietly, own_widths


@dataclass
class SimpleES(Candidate):
    log: bool = False
    alpha: float = 0.5
    level0: float = 0.0

    def __post_init__(self):
        self.name = self.name or ("ets_log" if self.log else "ets")

    def fit(self, y, horizon):
        from statsmodels.tsa.exponential_smoothing.ets import ETSModel
        z = np.log1p(y) if self.log else y
        res = fit_quietly(self, lambda: ETSModel(_series(z), error="add").fit(disp=False))
        p = dict(zip(res.model.param_names, np.asarray(res.params)))
        self.alpha, self.level0 = float(p["smoothing_level"]), float(p["initial_level"])
        if not self.log:
            self.own_widths = own_widths(res, len(z), horizon)

    def paths(self, y, start, origins, horizon):
        z = np.log1p(y[start:]) if self.log else y[start:]
        levels = level_path(z, self.alpha, self.level0)
        f = flat(levels[origins - 1 - start], horizon)
        return np.expm1(f) if self.log else f


@dataclass
class DampedES(Candidate):
    name: str = "ets_damped"
    params: tuple = (0.5, 0.1, 0.9, 0.0, 0.0)  # alpha, beta, phi, initial level, initial trend

    def fit(self, y, horizon):
        from statsmodels.tsa.exponential_smoothing.ets import ETSModel
        res = fit_quietly(self, lambda: ETSModel(_series(y), error="add", trend="add",
                                                 damped_trend=True).fit(disp=False))
        p = dict(zip(res.model.param_names, np.asarray(res.params)))
        self.params = tuple(float(p[k]) for k in ("smoothing_level", "smoothing_trend", "damping_trend",
                                                  "initial_level", "initial_trend"))
        self.own_widths = own_widths(res, len(y), horizon)

    def paths(self, y, start, origins, horizon):
        alpha, beta, phi, level, trend = self.params
        z = y[start:]
        levels, trends = np.empty(len(z)), np.empty(len(z))
        for t, v in enumerate(z):  # error-correction form, as ETSModel defines it
            err = v - (level + phi * trend)
            level, trend = level + phi * trend + alpha * err, phi * trend + beta * err
            levels[t], trends[t] = level, trend
        steps = np.cumsum(phi ** np.arange(1, horizon + 1))  # phi + phi^2 + ... + phi^h
        i = origins - 1 - start
        return levels[i][:, None] + trends[i][:, None] * steps[None, :]


def _series(z):
    import pandas as pd  # ETSModel's prediction summary needs an index (it fails on arrays)
    return pd.Series(np.asarray(z, dtype=float))
