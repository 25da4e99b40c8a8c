"""How much a worker's steps vary: quantiles of each calibration step's time over the median
of the steps of its shape (the simulator draws from them, sim/noise.py). A decode worker's
steps that a burst of the front's work fell in (front_events.py) get a table of their own."""
from __future__ import annotations

import numpy as np

from gpuprobe.perf.costmodel import NOISE_QUANTILES

MIN_NOISE_STEPS = 20  # repeated-shape steps needed to say how much steps vary


def step_noise(y: np.ndarray, shapes: np.ndarray) -> tuple[float, ...]:
    """NOISE_QUANTILES quantiles of each step's time over the median of the steps of its
    shape, over shapes seen at least twice; () from fewer than MIN_NOISE_STEPS such steps.

    The spread of repeated steps of one shape, not their spread around the fitted curve:
    the curve's own misfit between sizes is not noise, and a simulator that drew it at random
    would count it twice."""
    ratio = _shape_ratios(y, shapes)
    return _quantiles(ratio[np.isfinite(ratio)])


def split_step_noise(y: np.ndarray, shapes: np.ndarray, event: np.ndarray
                     ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(quiet, event): step_noise's quantiles of the steps without and with a front event
    (front_events), each over its shape's median of all of them. With fewer than
    MIN_NOISE_STEPS event steps: (step_noise of all, ()), one table as before the split."""
    ratio = _shape_ratios(y, shapes)
    ok = np.isfinite(ratio)
    busy = _quantiles(ratio[ok & event])
    if not busy:
        return _quantiles(ratio[ok]), ()
    return _quantiles(ratio[ok & ~event]), busy


def _shape_ratios(y: np.ndarray, shapes: np.ndarray) -> np.ndarray:
    """Each step's time over the median of its shape's steps; NaN for a shape seen once."""
    if not len(y):
        return np.zeros(0)
    _, inv, counts = np.unique(shapes, axis=0, return_inverse=True, return_counts=True)
    inv = inv.ravel()
    median = np.array([np.median(y[inv == g]) for g in range(len(counts))])
    ratio = y / np.maximum(median[inv], 1e-12)
    return np.where(counts[inv] >= 2, ratio, np.nan)


def _quantiles(ratio: np.ndarray) -> tuple[float, ...]:
    if len(ratio) < MIN_NOISE_STEPS:
        return ()
    q = np.quantile(ratio, (np.arange(NOISE_QUANTILES) + 0.5) / NOISE_QUANTILES)
    return tuple(float(v) for v in np.maximum.accumulate(np.maximum(q, 1e-3)))
