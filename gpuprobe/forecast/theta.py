"""Theta candidate (statsmodels ThetaModel, theta = 2): simple exponential smoothing plus half
the slope of a linear trend, the M3 competition's winner for short noisy series."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuprobe.forecast.candidate import Candidate, level_path
from gpuprobe.forecast.fitting import fit_quietly


@dataclass
class Theta(Candidate):
    name: str = "theta"
    b0: float = 0.0
    alpha: float = 0.5

    def fit(self, y, horizon):
        from statsmodels.tsa.forecasting.theta import ThetaModel
        res = fit_quietly(self, lambda: ThetaModel(y, period=1, deseasonalize=False).fit())
        self.b0, self.alpha = float(res.params["b0"]), float(np.clip(res.params["alpha"], 1e-4, 1.0))

    def paths(self, y, start, origins, horizon):
        levels = level_path(y[start:], self.alpha, float(y[start]))
        nobs = (origins - start).astype(float)[:, None]
        h = np.arange(horizon)[None, :]  # ThetaModel's drift term, with h - 1 = 0 .. horizon - 1
        drift = 0.5 * self.b0 * (h + 1 / self.alpha - (1 - self.alpha) ** nobs / self.alpha)
        return levels[origins - 1 - start][:, None] + drift
