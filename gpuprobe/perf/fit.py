"""Least-squares fits that carry their own quality: R^2, residuals, points and distinct sizes.

A fit on too few distinct sizes or with a poor R^2 is flagged 'low'; every prediction that
uses it inherits the flag and the reasons, so no number leaves the cost model silently.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MIN_DISTINCT_SIZES = 5
MIN_R2 = 0.9
# Where a curve's figures come from (Fit.source -> what the profile says). 'interpolated':
# a curve derived from measured ones of the same device (a worker at a device share that was
# not measured, rescaled from a measured share or the whole device).
ORIGINS = {"measured": "measured here", "store": "measured here",
           "silicon": "measured silicon data", "interpolated": "interpolated",
           "roofline": "roofline", "default": "default (not measured)"}
MEASURED = ("measured", "store", "silicon")  # sources whose curves were fitted to data


@dataclass(frozen=True)
class Fit:
    """y ~ sum(coef[i] * feature_i). Features are named in `terms` (e.g. '1', 'T', 'T^2').

    r2: coefficient of determination on the fitted points; rmse_s: root-mean-square residual
    (seconds for time fits); n_points / n_distinct: points and distinct x-sizes behind it;
    x_max: the largest size fitted (predictions past it extrapolate); source: a key of
    ORIGINS. r2 None: the curve was not fitted (roofline, default), nothing to measure it by.
    """

    terms: tuple[str, ...]
    coef: tuple[float, ...]
    r2: float | None = 1.0
    rmse_s: float = 0.0
    max_abs_rel_residual: float = 0.0
    n_points: int = 0
    n_distinct: int = 0
    x_max: float = float("inf")
    source: str = "measured"
    reasons: tuple[str, ...] = field(default=())

    @property
    def confidence(self) -> str:
        return "low" if self.reasons or self.source not in MEASURED else "high"

    @property
    def origin(self) -> str:
        return ORIGINS.get(self.source, self.source)

    def to_dict(self) -> dict:
        return {"terms": list(self.terms), "coef": list(self.coef), "r2": self.r2,
                "rmse_s": self.rmse_s, "max_abs_rel_residual": self.max_abs_rel_residual,
                "n_points": self.n_points, "n_distinct": self.n_distinct,
                "x_max": None if self.x_max == float("inf") else self.x_max,
                "source": self.source, "origin": self.origin, "reasons": list(self.reasons),
                "confidence": self.confidence}

    @classmethod
    def from_dict(cls, d: dict) -> "Fit":
        x_max = d.get("x_max")
        return cls(terms=tuple(d["terms"]), coef=tuple(float(c) for c in d["coef"]),
                   r2=None if d.get("r2", 1.0) is None else float(d.get("r2", 1.0)),
                   rmse_s=float(d.get("rmse_s", 0.0)),
                   max_abs_rel_residual=float(d.get("max_abs_rel_residual", 0.0)),
                   n_points=int(d.get("n_points", 0)), n_distinct=int(d.get("n_distinct", 0)),
                   x_max=float("inf") if x_max is None else float(x_max),
                   source=d.get("source", "measured"), reasons=tuple(d.get("reasons", ())))


def fixed(terms: tuple[str, ...], coef: tuple[float, ...], source: str,
          reasons: tuple[str, ...] = ()) -> Fit:
    """A curve that was not fitted (roofline, default): no R^2, no residuals."""
    return Fit(terms=terms, coef=tuple(float(c) for c in coef), r2=None, source=source,
               reasons=reasons)


def least_squares(X: np.ndarray, y: np.ndarray, terms: tuple[str, ...], sizes: np.ndarray,
                  what: str, nonneg: bool = True, min_distinct: int = MIN_DISTINCT_SIZES,
                  min_r2: float = MIN_R2, relative: bool = False) -> Fit:
    """Fit y = X @ coef. X: [n, len(terms)]; y: [n] seconds; sizes: [n] the x-size per point.

    nonneg: coefficients are physical times per unit, so a negative one (noise on a term that
    barely matters) is dropped and the rest refitted, rather than kept to predict negative times.
    relative: minimise relative rather than absolute residuals (rows weighted by 1/y), so a
    1 ms step is fitted as well as a 100 ms one: served workloads are mostly small steps, and
    an absolute fit lets the few largest calibration sizes decide the intercept.
    """
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    n_points, n_distinct = len(y), len(np.unique(sizes)) if len(y) else 0
    if n_points == 0:
        return fixed(terms, (0.0,) * len(terms), "default", (f"{what}: no points to fit",))
    active = list(range(len(terms)))
    coef = np.zeros(len(terms))
    w = 1.0 / np.maximum(np.abs(y), 1e-9) if relative else np.ones(len(y))
    while active:
        sol, *_ = np.linalg.lstsq(X[:, active] * w[:, None], y * w, rcond=None)
        if not nonneg or (sol >= 0).all() or len(active) == 1:
            coef[:] = 0.0
            coef[active] = np.maximum(sol, 0.0) if nonneg else sol
            break
        active.pop(int(np.argmin(sol)))
    pred = X @ coef
    resid = y - pred
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid ** 2).sum()) / ss_tot if ss_tot > 0 else 1.0
    rel = np.abs(resid) / np.maximum(np.abs(y), 1e-12)
    reasons = []
    if n_distinct < min_distinct:
        reasons.append(f"{what}: fitted on {n_distinct} distinct sizes (< {min_distinct})")
    if r2 < min_r2 and n_distinct > 1:
        reasons.append(f"{what}: R^2 {r2:.2f} below {min_r2}")
    return Fit(terms=terms, coef=tuple(float(c) for c in coef), r2=r2,
               rmse_s=float(np.sqrt((resid ** 2).mean())),
               max_abs_rel_residual=float(rel.max()), n_points=n_points, n_distinct=n_distinct,
               x_max=float(np.max(sizes)), source="measured", reasons=tuple(reasons))
