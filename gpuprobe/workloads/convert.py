"""Vectorised column conversion with per-row blame: text or JSON values -> numpy arrays.

Each converter returns (values, ok) and reports every value it cannot take to `BadRows` with
the row's file line, so a broken row names its file, line and field.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprobe.workloads.badrows import BadRows
from gpuprobe.workloads.csvblocks import NumberColumn

MAX_TOKENS = 10_000_000  # a count above this is a corrupt row, not a request (no model has such a context)
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _scalar_float(value) -> float:
    if isinstance(value, bool) or value is None:
        return np.nan
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return np.nan


def _parse_numbers(values: list) -> np.ndarray:
    if isinstance(values, NumberColumn):  # parsed already by pandas' C reader (csvblocks.py)
        return values.values.astype(np.float64, copy=True)
    try:
        arr = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        arr = np.array([_scalar_float(v) for v in values], dtype=np.float64)
    if values and type(values[0]) is not str and any(type(v) is bool for v in values):  # JSON true/false are not counts (CSV cells are all str)
        arr = np.array([_scalar_float(v) for v in values], dtype=np.float64)
    return arr


def numbers(values: list, lines: list[int], field: str, bad: BadRows) -> tuple[np.ndarray, np.ndarray]:
    """Finite floats; anything else (missing, text, empty, NaN, inf, lists) is rejected. `values` is a
    list, or a NumberColumn whose `[i]` gives the file's text for messages."""
    arr = _parse_numbers(values)
    ok = np.isfinite(arr)
    for i in np.flatnonzero(~ok):
        if values[i] is None:  # a JSON line without the field, or with null
            bad.reject(lines[i], field, "is missing", reason=f"field {field}: missing")
        else:
            bad.reject(lines[i], field, f"{_show(values[i])} is not a number", reason=f"field {field}: not a number")
    return arr, ok


def tokens(values: list, lines: list[int], field: str, bad: BadRows) -> tuple[np.ndarray, np.ndarray]:
    """Whole token counts in 0..MAX_TOKENS as int64."""
    arr, ok = numbers(values, lines, field, bad)
    checks = ((arr < 0, "is negative", "negative"),
              (arr > MAX_TOKENS, f"is more than {MAX_TOKENS:,} tokens", "absurd token count"),
              (arr != np.floor(arr), "is not a whole number", "not a whole number"))
    for mask, problem, reason in checks:
        for i in np.flatnonzero(mask & ok):
            bad.reject(lines[i], field, f"{_show(values[i])} {problem}", reason=f"field {field}: {reason}")
            ok[i] = False
    return np.where(ok, arr, 0).astype(np.int64), ok


def seconds(values: list, lines: list[int], field: str, bad: BadRows, unit: str = "s"
            ) -> tuple[np.ndarray, np.ndarray]:
    """Numeric times in `unit` -> float seconds."""
    arr, ok = numbers(values, lines, field, bad)
    return arr * TIME_UNITS[unit], ok


def epoch_seconds(values: list, lines: list[int], field: str, bad: BadRows) -> tuple[np.ndarray, np.ndarray]:
    """ISO 8601 wall-clock times (any fractional digits; no zone means UTC) -> Unix seconds."""
    texts = [v if isinstance(v, str) else "" for v in values]
    try:
        stamps = pd.to_datetime(pd.Series(texts, dtype=object), format="ISO8601", utc=True, errors="coerce")
    except (ValueError, TypeError, OverflowError):
        stamps = pd.Series([_one_stamp(t) for t in texts], dtype="datetime64[ns, UTC]")
    arr = _as_ns(stamps.dt.tz_convert("UTC").dt.tz_localize(None))
    ok = ~np.isnat(arr)
    out = np.where(ok, arr.astype(np.int64), 0) / 1e9
    for i in np.flatnonzero(~ok):
        bad.reject(lines[i], field, f"{_show(values[i])} is not a date-time (want e.g. 2023-11-16 18:17:03.97)",
                   reason=f"field {field}: not a date-time")
    return out, ok


def _as_ns(naive: pd.Series) -> np.ndarray:
    """datetime64[ns]; a stamp outside 1677..2262 (e.g. "-0" read as year 0) becomes NaT."""
    try:
        return naive.astype("datetime64[ns]").to_numpy()
    except (ValueError, OverflowError):  # pandas' OutOfBoundsDatetime is a ValueError
        lo, hi = pd.Timestamp.min, pd.Timestamp.max
        return np.array([v if v is not pd.NaT and lo <= v <= hi else np.datetime64("NaT") for v in naive],
                        dtype="datetime64[ns]")


def _one_stamp(text: str):
    try:
        return pd.Timestamp(text).tz_localize("UTC") if pd.Timestamp(text).tzinfo is None \
            else pd.Timestamp(text).tz_convert("UTC")
    except (ValueError, TypeError, OverflowError):
        return pd.NaT


def texts(values: list) -> np.ndarray:
    """Optional text columns: None stays None, everything else becomes str."""
    if isinstance(values, np.ndarray):  # a clean CSV block: all str already
        out = values.astype(object, copy=True)
        out[out == ""] = None
        return out
    return np.array([None if v is None or v == "" else str(v) for v in values], dtype=object)
