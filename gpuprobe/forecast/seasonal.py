"""Seasonal candidates, used only when a period was found in the data. STL + ETS for periods
STL handles quickly; Fourier terms + ETS for long ones (a day of 1-minute buckets, 1,440, is far
too long for SARIMAX and slow for STL): the seasonal shape is fitted once on the training
stretch, and exponential smoothing of what is left follows the level."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuprobe.forecast.candidate import Candidate, level_path
from gpuprobe.forecast.fitting import fit_quietly

STL_MAX_PERIOD = 288
FOURIER_TERMS = 8
LEVEL_FIT_WINDOW = 2000  # the residual's smoothing weight is fitted on its recent stretch


@dataclass
class _Deseasonalised(Candidate):
    """y minus a periodic profile, smoothed; forecast = level + profile at the target phase."""
    period: int = 0
    offset: int = 0  # index into y of the training stretch's first value
    alpha: float = 0.1
    level0: float = 0.0

    def _profile(self, idx: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _fit_level(self, rest: np.ndarray) -> None:
        from statsmodels.tsa.exponential_smoothing.ets import ETSModel
        import pandas as pd
        rest = rest[-LEVEL_FIT_WINDOW:]
        res = fit_quietly(self, lambda: ETSModel(pd.Series(rest), error="add").fit(disp=False))
        p = dict(zip(res.model.param_names, np.asarray(res.params)))
        self.alpha, self.level0 = float(p["smoothing_level"]), float(p["initial_level"])

    def paths(self, y, start, origins, horizon):
        idx = np.arange(start, len(y))
        levels = level_path(y[start:] - self._profile(idx), self.alpha, self.level0)
        target = origins[:, None] + np.arange(horizon)[None, :]
        return levels[origins - 1 - start][:, None] + self._profile(target)


@dataclass
class StlEts(_Deseasonalised):
    profile: np.ndarray | None = None

    NAME = "stl_ets({period})"

    def fit(self, y, horizon):
        from statsmodels.tsa.seasonal import STL
        res = fit_quietly(self, lambda: STL(y, period=self.period, robust=True).fit())
        seasonal = np.asarray(res.seasonal)[-self.period:]
        phase = (self.offset + len(y) - self.period + np.arange(self.period)) % self.period
        self.profile = np.empty(self.period)
        self.profile[phase] = seasonal
        self._fit_level(y - self._profile(self.offset + np.arange(len(y))))

    def _profile(self, idx):
        return self.profile[idx % self.period]


@dataclass
class FourierEts(_Deseasonalised):
    coef: np.ndarray | None = None

    NAME = "fourier_ets({period})"

    def _design(self, idx):
        k = np.arange(1, min(FOURIER_TERMS, self.period // 2) + 1)
        angle = 2 * np.pi * np.asarray(idx, dtype=float)[..., None] * k / self.period
        return np.concatenate([np.sin(angle), np.cos(angle)], axis=-1)

    def fit(self, y, horizon):
        import statsmodels.api as sm
        idx = self.offset + np.arange(len(y))
        res = fit_quietly(self, lambda: sm.OLS(y, sm.add_constant(self._design(idx), has_constant="add")).fit())
        self.coef = np.asarray(res.params)[1:]  # the constant belongs to the level
        self._fit_level(y - self._profile(idx))

    def _profile(self, idx):
        return self._design(idx) @ self.coef
