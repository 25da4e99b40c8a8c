"""Forecasting one series: find its season, backtest every candidate from rolling origins on
the later part of its history, keep the lowest MAE, calibrate the intervals.

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
        rows.append({"model": cand.name, "kind": cand.kind, **bt.score(err, scale, cand.own_widths),
                     "fit_s": fit_s, "note": "; ".join(cand.notes)})
        runs.append((rows[-1]["mae"], i, cand, fc, err))
    if not runs:
        return _too_short(y, horizon, notes + ["every candidate failed to fit"])
    _, _, best, fc, err = min(runs, key=lambda r: (r[0], r[1]))
    for row in rows:
        row["chosen"] = row["model"] == best.name
    out = _intervals(best, fc, err, notes)
    return _finish(out, best.name, rows, notes, period, nonneg, upper)


def _test_length(n: int, horizon: int, period: int | None) -> int | None:
    """Buckets at the end of the history whose origins are backtested, or None if too few."""
    test = min(n // 2, MAX_ORIGINS + horizon - 1)
    if period:  # at least two periods of origins, and two periods left to fit on
        test = min(max(test, SEASONAL_TEST_PERIODS * period), n - 2 * period)
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


def _intervals(best, fc, err, notes) -> dict:
    mean = fc[-1]
    conf = bt.conformal_offsets(err)
    own = best.own_widths
    kind = "conformal"
    if own is not None:
        c80, c95 = bt.coverage(err, own)
        if OWN_OK_80[0] <= c80 <= OWN_OK_80[1] and OWN_OK_95[0] <= c95 <= OWN_OK_95[1]:
            conf, kind = own, "own"
            notes.append(f"intervals: the model's own (backtest cover {c80:.0%} at 80%, {c95:.0%} at 95%)")
        else:
            how = "widened" if c80 < OWN_OK_80[0] else "narrowed"
            notes.append(f"intervals: the model's own covered {c80:.0%} (80%) and {c95:.0%} (95%) of the "
                         f"backtest; {how} from {err.shape[0]} backtest errors per step (conformal)")
    else:
        notes.append(f"intervals: conformal, from {err.shape[0]} backtest errors per step")
    return {"mean": mean, "lo80": mean + conf[0], "hi80": mean + conf[1], "lo95": mean + conf[2],
            "hi95": mean + conf[3], "interval": kind}


def _finish(out: dict, model: str, rows, notes, period, nonneg: bool, upper: float | None) -> dict:
    keys = ("mean", "lo80", "hi80", "lo95", "hi95")
    for k in keys:  # a rate is never negative (nor a share above 1): clip, which keeps coverage
        v = np.asarray(out[k], dtype=float)
        v = np.maximum(v, 0.0) if nonneg else v
        out[k] = [float(x) for x in (np.minimum(v, upper) if upper is not None else v)]
    for lo, hi in (("lo80", "hi80"), ("lo95", "hi95")):
        out[lo] = [min(a, m) for a, m in zip(out[lo], out["mean"])]
        out[hi] = [max(b, m) for b, m in zip(out[hi], out["mean"])]
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
