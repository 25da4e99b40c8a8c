"""Fitting a statsmodels model without its warnings reaching the terminal: each warning becomes
a note beside the candidate (a convergence warning says the parameters may be poor, which the
backtest then judges)."""
from __future__ import annotations

import warnings

import numpy as np


def fit_quietly(candidate, fit):
    """Run fit(); warnings are recorded in candidate.notes (once per kind) instead of printed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with np.errstate(all="ignore"):
            res = fit()
    for w in caught:
        text = f"{w.category.__name__}: {str(w.message).splitlines()[0][:120]}"
        if text not in candidate.notes:
            candidate.notes.append(text)
    return res


def own_widths(res, nobs: int, horizon: int) -> np.ndarray | None:
    """The model's own 80% and 95% prediction intervals as offsets from its mean:
    [lo80, hi80, lo95, hi95] x horizon; None if the model cannot give them."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pred = res.get_prediction(start=nobs, end=nobs + horizon - 1)
            rows = []
            for alpha in (0.2, 0.05):
                frame = pred.summary_frame(alpha=alpha)
                lo, hi = _bounds(frame)
                mean = np.asarray(frame["mean"], dtype=float)
                rows += [lo - mean, hi - mean]
        out = np.vstack(rows)
        return out if np.isfinite(out).all() else None
    except Exception:  # noqa: BLE001 - no own intervals is a normal outcome; conformal ones follow
        return None


def _bounds(frame):
    cols = list(frame.columns)
    lo = next(c for c in cols if c in ("pi_lower", "mean_ci_lower", "obs_ci_lower"))
    hi = next(c for c in cols if c in ("pi_upper", "mean_ci_upper", "obs_ci_upper"))
    if "obs_ci_lower" in cols:  # SARIMAX: the interval for a new observation, not for the mean
        lo, hi = "obs_ci_lower", "obs_ci_upper"
    return np.asarray(frame[lo], dtype=float), np.asarray(frame[hi], dtype=float)
