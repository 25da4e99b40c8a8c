"""Forecasting one series: find its season, backtest every candidate from rolling origins on
the later part of its history, keep the lowest MAE (or the mean of the near-equal best few),
calibrate the intervals.

    out = forecast_series(y, horizon=6)   # y: one value per bucket, oldest first
    out["model"], out["mean"], out["lo80"], ..., out["backtest"] (one row per candidate)
"""
from __future__ import annotations

import time

import numpy as np

from gpuprobe.forecast import backtest as bt
from gpuprobe.forecast.candidates import build, fit_start, is_seasonal
from gpuprobe.forecast.seasonality import find_period

MIN_ORIGINS = 10            # fewer backtest origins than this and nothing can be chosen or calibrated
MAX_ORIGINS = 1000          # non-seasonal: the last this many buckets are the backtest stretch
SEASONAL_TEST_PERIODS = 2   # seasonal: two periods of origins (two days of a daily cycle)
OWN_OK_80 = (0.75, 0.85)    # a model's own 80% intervals are kept if their backtest cover is here
OWN_OK_95 = (0.90, 0.98)
COMBINE_MAX = 3             # the forecast averages at most this many of the best candidates,
NEAR = 0.10                 # those whose backtest MAE is within this share of the best


def forecast_series(y: np.ndarray, horizon: int, nonneg: bool = True, upper: float | None = None,
                    progress=None) -> dict:
    """Point forecast and 80/95% intervals for the `horizon` buckets after y, with the model
    chosen by backtest. Keys: model, mean, lo80, hi80, lo95, hi95 (lists), interval ('own',
    'conformal' or 'none'), note (one line), notes (list), period, backtest (rows)."""
    y = np.asarray(y, dtype=float)
    if len(y) == 0 or np.ptp(y) == 0:
        return _constant(y, horizon)
    period, season_note = find_period(y)
    notes = [season_note]
    test = _test_length(len(y), horizon, period)
    if test is None and period:
        notes.append(f"season of {period} buckets ignored: too little history for a seasonal backtest")
        period, test = None, _test_length(len(y), horizon, None)
    if test is None:
        return _too_short(y, horizon, notes)
    train_end = len(y) - test
    origins = np.arange(train_end, len(y) - horizon + 1)
    scale = bt.naive_scale(y[:train_end])
    scales = bt.local_scale(y, np.append(origins, len(y)))  # per origin, and now
    rows, runs = [], []
    cands = [c for c in build(period, nonneg and y.min() >= 0)
             if not is_seasonal(c) or train_end >= 2 * period]
    for i, cand in enumerate(cands):
        if progress:
            progress(f"{cand.name} ({i + 1}/{len(cands)})")
        run = _run(cand, y, train_end, origins, horizon, period)
        if run is None:
            rows.append({"model": cand.name, "kind": cand.kind, "note": "; ".join(cand.notes) or "fit failed"})
            continue
        fc, err, fit_s = run
        rows.append({"model": cand.name, "kind": cand.kind, **bt.score(err, scale, cand.own_widths, scales[:-1]),
                     "fit_s": fit_s, "note": "; ".join(cand.notes), "chosen": False})
        runs.append((rows[-1]["mae"], i, cand, fc, err))
    if not runs:
        return _too_short(y, horizon, notes + ["every candidate failed to fit"])
    name, own, fc, err = _choose(sorted(runs, key=lambda r: (r[0], r[1])), rows, scale, scales, notes)
    out = _intervals(own, fc, err, scales, notes)
    return _finish(out, name, rows, notes, period, nonneg, upper)


def _choose(runs, rows, scale, scales, notes):
    """The forecast: the mean of the best few candidates whose backtest MAE is within NEAR of
    the best, else the best alone. Between near-equal candidates the backtest's ranking is
    mostly noise, and averaging their forecasts cancels part of their errors, which picking
    one of them cannot; a clearly better candidate is not diluted. Returns (name, own interval
    widths or None, forecasts [origins + 1, horizon], backtest errors)."""
    best_mae = runs[0][0]
    members = [r for r in runs[:COMBINE_MAX] if r[0] <= (1 + NEAR) * best_mae]
    if len(members) == 1:
        _, _, cand, fc, err = members[0]
        next(r for r in rows if r["model"] == cand.name)["chosen"] = True
        return cand.name, cand.own_widths, fc, err
    fc = np.mean([r[3] for r in members], axis=0)
    err = np.mean([r[4] for r in members], axis=0)  # actual - mean(f) = mean(actual - f)
    name = f"mean({', '.join(r[2].name for r in members)})"
    notes.append(f"{len(members)} candidates within {NEAR:.0%} of the best backtest MAE: their mean")
    rows.append({"model": name, "kind": "combination", **bt.score(err, scale, None, scales[:-1]),
                 "fit_s": 0.0, "note": "", "chosen": True})
    return name, None, fc, err


def _test_length(n: int, horizon: int, period: int | None) -> int | None:
    """Buckets at the end of the history whose origins are backtested, or None if too few."""
    test = min(n // 2, MAX_ORIGINS + horizon - 1)
    if period:  # two periods of origins if there is room, and two periods left to fit on
        test = min(max(test, SEASONAL_TEST_PERIODS * period), n - 2 * period)
        if test - horizon + 1 < period:  # origins in only some phases of the season: the score
            return None                  # (and the intervals) would rest on that stretch alone
    return test if test - horizon + 1 >= MIN_ORIGINS else None


def _run(cand, y, train_end, origins, horizon, period):
    """Fit on the training stretch, forecast from every origin plus the final one; None if it fails."""
    start = fit_start(cand, train_end, period)
    if hasattr(cand, "offset"):
        cand.offset = start
    t0 = time.perf_counter()
    try:
        cand.fit(y[start:train_end], horizon)
        fc = cand.paths(y, start, np.append(origins, len(y)), horizon)
    except Exception as exc:  # noqa: BLE001 - statsmodels fails in many ways; the others remain
        cand.notes.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}")
        return None
    fit_s = time.perf_counter() - t0
    if not np.isfinite(fc).all():
        cand.notes.append("forecast not finite")
        return None
    return fc, bt.errors(y, fc[:-1], origins), fit_s


def _intervals(own, fc, err, scales, notes) -> dict:
    """Split-conformal intervals from the backtest errors scaled by the local spread, unless
    the model's own intervals already covered 75-85% (80%) and 90-98% (95%) of the backtest."""
    mean = fc[-1]
    n = err.shape[0]
    widths, kind = bt.conformal_offsets(err / scales[:-1, None]) * scales[-1], "conformal"
    how = (f"conformal, from {n} backtest errors per step scaled by the spread of the last "
           f"{bt.SCALE_WINDOW} buckets")
    if n < 1 / (1 - bt.LEVELS[1][1]) - 1:
        how += f" (too few for a finite-sample 95% bound: the widest error stands in)"
    if own is not None:
        c80, c95 = bt.coverage(err, own)
        if OWN_OK_80[0] <= c80 <= OWN_OK_80[1] and OWN_OK_95[0] <= c95 <= OWN_OK_95[1]:
            widths, kind = own, "own"
            how = f"the model's own (backtest cover {c80:.0%} at 80%, {c95:.0%} at 95%)"
        else:
            how = f"the model's own covered {c80:.0%} (80%) and {c95:.0%} (95%) of the backtest; " + how
    notes.append(f"intervals: {how}")
    return {"mean": mean, "lo80": mean + widths[0], "hi80": mean + widths[1], "lo95": mean + widths[2],
            "hi95": mean + widths[3], "interval": kind}


def _finish(out: dict, model: str, rows, notes, period, nonneg: bool, upper: float | None) -> dict:
    keys = ("mean", "lo80", "hi80", "lo95", "hi95")
    for k in keys:  # a rate is never negative (nor a share above 1): clip, which keeps coverage
        v = np.asarray(out[k], dtype=float)
        v = np.maximum(v, 0.0) if nonneg else v
        out[k] = [float(x) for x in (np.minimum(v, upper) if upper is not None else v)]
    for lo, hi in (("lo80", "hi80"), ("lo95", "hi95")):
        out[lo] = [min(a, m) for a, m in zip(out[lo], out["mean"])]
        out[hi] = [max(b, m) for b, m in zip(out[hi], out["mean"])]
    # per-step quantiles of few errors can cross: a 95% band never lies inside the 80% one
    out["lo95"] = [min(a, b) for a, b in zip(out["lo95"], out["lo80"])]
    out["hi95"] = [max(a, b) for a, b in zip(out["hi95"], out["hi80"])]
    chosen = next((r for r in rows if r.get("chosen")), {})
    notes = [n for n in notes if n]
    return {**out, "model": model, "period": period, "backtest": rows, "notes": notes,
            "note": "; ".join([*notes, chosen.get("note", "")]).strip("; ")}


def _constant(y: np.ndarray, horizon: int) -> dict:
    value = float(y[-1]) if len(y) else 0.0
    why = "no history" if not len(y) else f"constant series ({value:g} in all {len(y)} buckets)"
    note = f"{why}: constant forecast, zero-width intervals"
    band = [value] * horizon
    return {"model": "constant", "mean": band, "lo80": band, "hi80": band, "lo95": band, "hi95": band,
            "interval": "none", "period": None, "backtest": [], "notes": [note], "note": note}


def _too_short(y: np.ndarray, horizon: int, notes: list) -> dict:
    """Too little history to backtest: the mean of what there is, with the spread of the history
    as a plain band (not calibrated, and the note says so)."""
    note = (f"too little history ({len(y)} buckets) to backtest: the mean of the history, with its "
            f"10-90% and 2.5-97.5% spread as uncalibrated intervals")
    q = np.quantile(y, [0.10, 0.90, 0.025, 0.975])
    mean = float(np.mean(y))
    return {"model": "history_mean", "mean": [mean] * horizon, "lo80": [float(q[0])] * horizon,
            "hi80": [float(q[1])] * horizon, "lo95": [float(q[2])] * horizon, "hi95": [float(q[3])] * horizon,
            "interval": "history", "period": None, "backtest": [], "notes": [*notes, note],
            "note": "; ".join([*notes, note])}
