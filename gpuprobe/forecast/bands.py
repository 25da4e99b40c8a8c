"""A stored forecast's interval bands as the polygons a chart fills, for the dashboard and the
report alike (no plotly, no statsmodels here).

Two things made a band look wrong: rows of several forecasts drawn as one (the rows of a
forecast stored without a forecast_id were read with every other forecast's, so the outline
zig-zagged between them, down to another forecast's bound), and a step without a bound (NaN)
filled by something else (the point forecast, or nothing, which broke the outline). A band is
outlined over the steps that have both bounds, one forecast's rows at a time.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def one_forecast(rows: pd.DataFrame, forecast_id: str | None, created_s: float | None = None) -> pd.DataFrame:
    """The rows of one stored forecast: by its forecast_id, else (rows stored without one)
    those without an id written at `created_s`."""
    if forecast_id is not None and "forecast_id" in rows:
        return rows[rows["forecast_id"] == forecast_id]
    keep = rows["forecast_id"].isna() if "forecast_id" in rows else pd.Series(True, index=rows.index)
    if created_s is not None:
        keep &= np.isclose(rows["created_s"].astype(float), float(created_s))
    return rows[keep]


def band_outline(x, lo, hi) -> tuple[np.ndarray, np.ndarray]:
    """(xs, ys) of the polygon between lo and hi over x (forward along hi, back along lo),
    over the steps where both bounds are finite; empty where none are."""
    x, lo, hi = (np.asarray(v, dtype=float) for v in (x, lo, hi))
    order = np.argsort(x, kind="stable")
    x, lo, hi = x[order], lo[order], hi[order]
    ok = np.isfinite(x) & np.isfinite(lo) & np.isfinite(hi)
    x, lo, hi = x[ok], lo[ok], hi[ok]
    return np.r_[x, x[::-1]], np.r_[hi, lo[::-1]]
