"""Change points in a series (the bucketed prefill share): binary segmentation on the mean.

Method: split the segment where splitting most reduces the sum of squared deviations from the
segment means; keep the split when the reduction exceeds a BIC-like penalty 3 * sigma^2 * ln(n),
with sigma estimated from first differences (std / sqrt 2), which a few steps barely inflate
while heavy-tailed noise (real traces) is fully counted. Recurse on both halves. Segments are at least `min_size` points.
"""
from __future__ import annotations

import numpy as np


def _best_split(x: np.ndarray, min_size: int) -> tuple[int, float]:
    n = len(x)
    if n < 2 * min_size:
        return -1, 0.0
    csum, csq = np.cumsum(x), np.cumsum(x * x)
    total_sse = csq[-1] - csum[-1] ** 2 / n
    k = np.arange(min_size, n - min_size + 1)           # left segment is x[:k]
    left = csq[k - 1] - csum[k - 1] ** 2 / k
    right = (csq[-1] - csq[k - 1]) - (csum[-1] - csum[k - 1]) ** 2 / (n - k)
    gain = total_sse - (left + right)
    i = int(np.argmax(gain))
    return int(k[i]), float(gain[i])


def noise_sigma(x: np.ndarray) -> float:
    if len(x) < 3:
        return 0.0
    return float(np.std(np.diff(x)) / np.sqrt(2))


def change_points(values, min_size: int = 3, max_points: int = 10, penalty: float | None = None) -> list[int]:
    """Indices where a new segment starts (sorted). NaNs must be removed by the caller."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2 * min_size:
        return []
    if penalty is None:
        sigma = max(noise_sigma(x), 1e-3)  # floor: a perfectly flat series must not split on rounding
        penalty = 3.0 * sigma ** 2 * np.log(len(x))
    found: list[int] = []
    segments = [(0, len(x))]
    while segments and len(found) < max_points:
        start, end = segments.pop()
        k, gain = _best_split(x[start:end], min_size)
        if k < 0 or gain <= penalty:
            continue
        found.append(start + k)
        segments += [(start, start + k), (start + k, end)]
    return sorted(found)
