"""Fit a worker's StepCost from step records (the server's `steps` rows), and links from
request records (kv_handoff_s vs kv_handoff_bytes).

Step records carry only the step's token sums, so the attention term Q is taken as T^2 (exact
for one prompt per step, as in a calibration sweep; an overestimate for batched prompts).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprobe.perf.costmodel import DECODE_TERMS, PREFILL_TERMS, Link, StepCost
from gpuprobe.perf.fit import least_squares

STEP_COLS = ("duration_s", "num_prefill_tokens", "num_decode_seqs", "num_decode_ctx_tokens")


def fit_worker(steps: pd.DataFrame, what: str = "worker", threads: int | None = None) -> StepCost:
    """StepCost from one worker's steps (columns STEP_COLS, plus start_s for the overhead)."""
    missing = [c for c in STEP_COLS if c not in steps.columns]
    if missing:
        raise ValueError(f"{what}: step records lack {missing}")
    s = steps.fillna({c: 0 for c in STEP_COLS[1:]})
    T = s["num_prefill_tokens"].to_numpy(float)
    B = s["num_decode_seqs"].to_numpy(float)
    C = s["num_decode_ctx_tokens"].to_numpy(float)
    y = s["duration_s"].to_numpy(float)
    pre, dec, mix = (T > 0) & (B == 0), (B > 0) & (T == 0), (T > 0) & (B > 0)
    # Medians per size, then least squares: a step stalled by another process on a shared
    # machine is an outlier of a size, and must not tilt the curve.
    Tp, yp = _medians(np.c_[T[pre]], y[pre])
    prefill = least_squares(np.c_[np.ones(len(Tp)), Tp[:, 0], Tp[:, 0] ** 2], yp,
                            PREFILL_TERMS, Tp[:, 0], f"{what} prefill")
    c_bin = np.round(C[dec] / np.maximum(B[dec], 1) / 32.0)  # context per sequence, 32-token bins
    Xd, yd = _medians(np.c_[B[dec], c_bin], y[dec], np.c_[B[dec], C[dec]])
    decode = least_squares(np.c_[np.ones(len(yd)), Xd[:, 0], Xd[:, 1]], yd,
                           DECODE_TERMS, Xd[:, 0], f"{what} decode")
    cost = StepCost(prefill=prefill, decode=decode, threads=threads,
                    step_overhead_s=step_gap_s(steps))
    if mix.sum() >= 3:
        f = cost.step_fn()
        base = np.array([f(t, t * t, b, c) - cost.step_overhead_s
                         for t, b, c in zip(T[mix], B[mix], C[mix])])
        ratio = y[mix] / np.maximum(base, 1e-9)
        cost = StepCost(prefill=prefill, decode=decode, threads=threads,
                        step_overhead_s=cost.step_overhead_s,
                        mixed_factor=float(np.median(ratio)), mixed_source="measured")
    return cost


def _medians(keys: np.ndarray, y: np.ndarray, x: np.ndarray | None = None):
    """Group rows by `keys`; per group the median of `x` (default: the keys) and of y."""
    x = keys if x is None else x
    if len(y) == 0:
        return x[:0].astype(float), y[:0]
    _, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.ravel()
    groups = range(inv.max() + 1)
    xs = np.array([np.median(x[inv == g], axis=0) for g in groups], dtype=float)
    ys = np.array([np.median(y[inv == g]) for g in groups], dtype=float)
    return xs, ys


def step_gap_s(steps: pd.DataFrame) -> float:
    """Median time between one step's end and the next one's start while the worker is busy.

    That is the engine loop outside the forward pass (schedule, postprocess, sending tokens to
    the front). Gaps over 20 ms are idle waits, not overhead, and are left out.
    """
    if "start_s" not in steps.columns or len(steps) < 3:
        return 0.0
    s = steps.sort_values("start_s")
    gaps = s["start_s"].to_numpy()[1:] - (s["start_s"] + s["duration_s"]).to_numpy()[:-1]
    busy = gaps[(gaps >= 0) & (gaps < 0.02)]
    return float(np.median(busy)) if len(busy) else 0.0


def fit_link(requests: pd.DataFrame, source: str = "measured") -> Link | None:
    """latency + bytes / bandwidth from requests with kv_handoff_s and kv_handoff_bytes."""
    if "kv_handoff_s" not in requests.columns:
        return None
    r = requests.dropna(subset=["kv_handoff_s", "kv_handoff_bytes"])
    if len(r) < 3:
        return None
    x = r["kv_handoff_bytes"].to_numpy(float)
    y = r["kv_handoff_s"].to_numpy(float)
    if np.ptp(x) <= 0:
        return Link(float(np.median(y)), 1e12, source)
    fit = least_squares(np.c_[np.ones(len(x)), x], y, ("1", "bytes"), x, "handoff")
    lat, per_byte = fit.coef
    return Link(lat, 1.0 / per_byte if per_byte > 0 else 1e12, source)
