"""Which candidates a series gets, and on which stretch of its history each is fitted."""
from __future__ import annotations

from gpuprobe.forecast.arima import Arma
from gpuprobe.forecast.baselines import MovingMedian, baselines
from gpuprobe.forecast.seasonal import STL_MAX_PERIOD, FourierEts, StlEts
from gpuprobe.forecast.smoothing import DampedES, SimpleES
from gpuprobe.forecast.theta import Theta

FIT_WINDOW = 2000          # non-seasonal models: recent buckets they are fitted on
SEASONAL_FIT_PERIODS = 7   # seasonal models: this many periods (a week of days)
MEDIAN_WINDOWS = (12, 36)


def build(period: int | None, nonneg: bool) -> list:
    """Baselines first (on a tie the simpler forecast wins), then the models."""
    out = [*baselines(period), *(MovingMedian(window=w) for w in MEDIAN_WINDOWS),
           SimpleES(), DampedES(), Theta(), Arma()]
    if nonneg:
        out.insert(len(out) - 3, SimpleES(log=True))
    if period:
        out.append(StlEts(period=period) if period <= STL_MAX_PERIOD else FourierEts(period=period))
    return out


def fit_start(candidate, train_end: int, period: int | None) -> int:
    """Index where the candidate's training stretch begins (it ends at train_end)."""
    seasonal = isinstance(candidate, (StlEts, FourierEts))
    window = SEASONAL_FIT_PERIODS * period if seasonal else FIT_WINDOW
    return max(0, train_end - window)


def is_seasonal(candidate) -> bool:
    return isinstance(candidate, (StlEts, FourierEts))
