"""SARIMAX candidate: ARMA(1,1) with a constant, statsmodels' ARIMA (its SARIMAX state space),
estimated by Hannan-Rissanen on a recent window: full likelihood fitting took 1-10 s per series
on the shared 2-core machine, the regression estimator about 0.1 s."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuprobe.forecast.candidate import Candidate
from gpuprobe.forecast.fitting import fit_quietly, own_widths

FIT_WINDOW = 500  # buckets


@dataclass
class Arma(Candidate):
    name: str = "sarimax(1,0,1)"
    params: tuple = (0.0, 0.0, 0.0)  # mean, ar, ma

    def fit(self, y, horizon):
        from statsmodels.tsa.arima.model import ARIMA
        z = y[-FIT_WINDOW:]
        res = fit_quietly(self, lambda: ARIMA(z, order=(1, 0, 1), trend="c").fit(method="hannan_rissanen"))
        p = dict(zip(res.model.param_names, np.asarray(res.params)))
        ar, ma = float(p["ar.L1"]), float(p["ma.L1"])
        if not (abs(ar) < 1 and abs(ma) < 1):
            raise ValueError(f"non-stationary or non-invertible estimate (ar {ar:.2f}, ma {ma:.2f})")
        self.params = (float(p["const"]), ar, ma)  # ARIMA's constant is the series' mean
        self.own_widths = own_widths(res, len(z), horizon)

    def paths(self, y, start, origins, horizon):
        mean, ar, ma = self.params
        z = y[start:] - mean
        pred = np.empty(len(z) + 1)  # pred[t]: one-step prediction of z[t] from z[:t]
        pred[0], err = 0.0, 0.0
        for t, v in enumerate(z):
            err = v - pred[t]
            pred[t + 1] = ar * v + ma * err
        decay = ar ** np.arange(horizon)  # h steps ahead: ar^(h-1) times the one-step prediction
        return mean + pred[origins - start][:, None] * decay[None, :]
