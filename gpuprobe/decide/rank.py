"""The one ranking rule for layouts: goodput per device, then p99 TBT, then simplicity.

recommend, simulate's pick and the demo's "best per GPU" all order candidates with rank(), so
they cannot disagree on the same figures. Differences the search cannot resolve are no
reason to pick a layout with more devices or moving parts: goodputs within
GOODPUT_TOLERANCE of the best tie, and among those p99 TBTs within TBT_TOLERANCE of the
lowest; the simplest of the tied comes first (monolithic, intra, cross; fewer devices).
"""
from __future__ import annotations

import math

from gpuprobe.perf.metrics import TBT_TOLERANCE

GOODPUT_TOLERANCE = 0.05  # the goodput search stops at brackets 5% wide


def rank(rows: list[dict], goodput_tol: float = GOODPUT_TOLERANCE,
         tbt_tol: float = TBT_TOLERANCE) -> list[dict]:
    """rows: dicts with max_goodput_rps_per_device, tbt_p99_s (at that goodput; NaN or None
    when unknown) and simplicity (a sort key, simpler smaller). Returns them best first: the
    best is chosen from those left, again and again."""
    left, out = list(rows), []
    while left:
        best = _best(left, goodput_tol, tbt_tol)
        out.append(best)
        left.remove(best)
    return out


def tied(rows: list[dict], goodput_tol: float = GOODPUT_TOLERANCE,
         tbt_tol: float = TBT_TOLERANCE) -> list[dict]:
    """The rows that cannot be told apart from the best, simplest first."""
    top = max(_g(r) for r in rows)
    same = [r for r in rows if _g(r) >= top * (1 - goodput_tol) - 1e-12]
    low = min(_tbt(r) for r in same)
    if math.isfinite(low):
        same = [r for r in same if _tbt(r) <= low * (1 + tbt_tol)]
    return sorted(same, key=lambda r: (r["simplicity"], _tbt(r)))


def _best(rows, goodput_tol, tbt_tol) -> dict:
    return tied(rows, goodput_tol, tbt_tol)[0]


def _g(r: dict) -> float:
    v = r.get("max_goodput_rps_per_device")
    return float(v) if v is not None and v == v else 0.0


def _tbt(r: dict) -> float:
    v = r.get("tbt_p99_s")
    return float(v) if v is not None and v == v else math.inf
