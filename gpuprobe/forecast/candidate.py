"""What every forecasting candidate provides, and the causal paths that backtest them.

A candidate is fitted once on a training stretch (`fit`), then with those parameters fixed it
forecasts from every origin of a later stretch (`paths`): row i of the result is the forecast of
y[o_i : o_i + horizon] made from y[:o_i] alone. The backtest scores those rows and the final
forecast is simply the row for the origin at the end of the history, so the intervals calibrated
on the backtest belong to exactly the procedure that makes the forecast.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Candidate:
    """Base: `name`, `kind` ('baseline' or 'model'), `notes` gathered while fitting.
    `own_widths`: None, or a (4, horizon) array of lo80, hi80, lo95, hi95 offsets from the mean
    given by the model's own (statsmodels) prediction intervals."""
    name: str = ""
    kind: str = "model"
    notes: list = field(default_factory=list)
    own_widths: np.ndarray | None = None
    NAME = ""  # the default name, formatted with the fields (e.g. "ma{window}")

    def __post_init__(self):
        self.name = self.name or self.NAME.format(**vars(self))

    def fit(self, y: np.ndarray, horizon: int) -> None:  # baselines have nothing to fit
        pass

    def paths(self, y: np.ndarray, start: int, origins: np.ndarray, horizon: int) -> np.ndarray:
        """Forecasts [len(origins), horizon]; y[start:] is the stretch the recursion runs over
        (start <= every origin), origins are indices into y."""
        raise NotImplementedError


def level_path(y: np.ndarray, alpha: float, level0: float) -> np.ndarray:
    """Simple exponential smoothing levels: out[t] is the level after seeing y[t]."""
    from scipy.signal import lfilter
    zi = np.array([(1 - alpha) * level0])
    out, _ = lfilter([alpha], [1.0, -(1 - alpha)], y, zi=zi)
    return out


def flat(levels_before: np.ndarray, horizon: int) -> np.ndarray:
    """A flat forecast per origin: [len, horizon]."""
    return np.repeat(levels_before[:, None], horizon, axis=1)
