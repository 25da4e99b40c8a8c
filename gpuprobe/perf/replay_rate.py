"""The rate validate replays a workload at: a fraction of the monolithic capacity.

A trace's mean rate says little about the load a server sees when the trace is bursty. The
first 300 requests of the Azure code trace span 217 s, and 230 of them arrive in the last
40 s: scaled so that the mean is 35% of capacity, that stretch ran at 1.5x capacity, so the
queue grew through the whole replay, TTFT measured the backlog, and its p50 moved 2-3x from
one replay of the same schedule to the next. Over 300-request windows of that trace, the
busiest 60 requests arrive 2.7-19x faster than the window's mean (Azure conversation:
1.2-2.0x).

So the load is measured where it matters, at the busiest stretch (basis 'peak'): the rate at
which the `PEAK_SHARE` of the requests that arrive closest together come in. Scaling a trace
so that stretch runs at a fraction of capacity leaves long idle gaps elsewhere; a server
idle for ten seconds is as idle as one idle for one, so gaps longer than `max_idle_s` of
replay time are cut to it. Where the schedule must end within a bound (validate's default
keeps a run within 10 minutes), the cap on gaps is lowered until it does: the quiet
stretches are compressed and the busiest one keeps its load. (Raising the whole rate instead
took azure-code windows' busiest stretch to 0.6-1.35 of capacity, where TTFT measures a
backlog again.) Only a trace whose busiest stretch is one instant is sped up as a whole.
Basis 'mean' keeps the plain definition (mean rate over
capacity) and the trace's gaps as they are.

The schedule is plain data: the replay and the simulator get the same arrival times.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

PEAK_SHARE = 0.2     # of the requests: the busiest stretch is this many consecutive arrivals
MIN_PEAK_WINDOW = 10
BASES = ("peak", "mean")


@dataclass(frozen=True)
class ReplayRate:
    """How a workload is replayed: arrival_s of the schedule, and what load that is."""

    arrival_s: np.ndarray
    speed: float          # trace time / replay time, before idle gaps are cut
    basis: str            # 'peak', 'mean', or 'rate' (a mean rate given outright)
    load: float | None    # the fraction of capacity asked for (None with a rate)
    mean_rps: float       # of the schedule as replayed (idle gaps cut)
    peak_rps: float       # of its busiest stretch
    mean_load: float      # mean_rps / capacity
    peak_load: float      # peak_rps / capacity
    idle_cut_s: float     # replay time removed by cutting idle gaps
    peak_window: int      # requests in the busiest stretch
    gap_cap_s: float | None = None  # gaps longer than this were cut to it (None: none cut)

    def info(self) -> dict:
        return {"basis": self.basis, "load": self.load, "speed": self.speed,
                "mean_rps": self.mean_rps,
                "peak_rps": self.peak_rps, "mean_load": self.mean_load,
                "peak_load": self.peak_load, "idle_cut_s": self.idle_cut_s,
                "gap_cap_s": self.gap_cap_s,
                "peak_window": self.peak_window, "span_s": float(self.arrival_s[-1])}


def peak_window(n: int) -> int:
    """Requests in the busiest stretch of an n-request workload."""
    return int(min(n, max(MIN_PEAK_WINDOW, round(PEAK_SHARE * n))))


def busiest_rate(arrival_s: np.ndarray, window: int) -> float:
    """Requests per second of the `window` consecutive arrivals closest together (inf when
    they share one instant)."""
    t = np.asarray(arrival_s, dtype=float)
    if len(t) < 2:
        return 0.0
    w = max(2, min(window, len(t)))
    spans = t[w - 1:] - t[:len(t) - w + 1]
    shortest = float(spans.min())
    return float("inf") if shortest <= 0 else (w - 1) / shortest


def cut_idle(arrival_s: np.ndarray, max_idle_s: float | None) -> np.ndarray:
    """arrival_s with every gap longer than max_idle_s shortened to it (None: unchanged)."""
    t = np.asarray(arrival_s, dtype=float)
    if max_idle_s is None or len(t) < 2:
        return t - (t[0] if len(t) else 0.0)
    return np.concatenate([[0.0], np.cumsum(np.minimum(np.diff(t), max_idle_s))])


def replay_rate(arrival_s: np.ndarray, capacity_rps: float, load: float | None = None,
                basis: str = "peak", rate_rps: float | None = None,
                max_idle_s: float | None = 1.0, max_span_s: float | None = None) -> ReplayRate:
    """The replay schedule of a workload (arrival_s from its first request, ascending).

    rate_rps: replay at this mean rate (the trace's gaps kept), whatever the load.
    load with basis 'peak': the busiest stretch at load * capacity, idle gaps cut to
    max_idle_s; with max_span_s, the cap on gaps is lowered where needed for the schedule to
    end within it (the rate is raised instead only for a trace whose busiest stretch is one
    instant, which has no other bound).
    load with basis 'mean': the mean at load * capacity, gaps kept.
    """
    if basis not in BASES:
        raise ValueError(f"load basis must be one of {', '.join(BASES)}, got {basis!r}")
    t = np.asarray(arrival_s, dtype=float)
    t = t - t[0]
    n = len(t)
    mean_trace = (n - 1) / t[-1] if n > 1 and t[-1] > 0 else float("inf")
    window = peak_window(n)
    if rate_rps is not None or basis == "mean":
        target = rate_rps if rate_rps is not None else load * capacity_rps
        speed = target / mean_trace if np.isfinite(mean_trace) else 1.0
        sched = t / speed
        basis = "rate" if rate_rps is not None else "mean"
        idle = None
    else:
        peak_trace = busiest_rate(t, window)
        speed = load * capacity_rps / peak_trace if np.isfinite(peak_trace) else 0.0
        idle = max_idle_s
        if max_span_s is not None and _span(t, speed, idle) > max_span_s:
            if speed > 0:  # compress the quiet stretches: a lower cap on the gaps
                idle = _cap_for_span(np.diff(t) / speed, max_span_s)
            else:
                speed = _speed_for_span(t, idle, max_span_s)
        sched = cut_idle(t / speed, idle) if speed > 0 else np.zeros(n)
    span = float(sched[-1]) if n else 0.0
    mean = (n - 1) / span if span > 0 else float("inf")
    peak = busiest_rate(sched, window)
    raw_span = float(t[-1] / speed) if speed > 0 else 0.0
    return ReplayRate(arrival_s=sched, speed=float(speed), basis=basis,
                      load=None if basis == "rate" else load, mean_rps=float(mean),
                      peak_rps=peak, mean_load=float(mean / capacity_rps),
                      peak_load=float(peak / capacity_rps), idle_cut_s=max(0.0, raw_span - span),
                      peak_window=window, gap_cap_s=idle)


def _span(t: np.ndarray, speed: float, max_idle_s: float | None) -> float:
    if speed <= 0:
        return float("inf")
    g = np.diff(t) / speed
    return float(np.sum(g if max_idle_s is None else np.minimum(g, max_idle_s)))


def _cap_for_span(gaps: np.ndarray, span_s: float) -> float:
    """The cap c with sum(min(gaps, c)) == span_s, for 0 < span_s < sum(gaps): with the gaps
    ascending, the first i where cutting gaps[i:] to one value leaves that value <= gaps[i]."""
    g = np.sort(gaps)
    kept = np.concatenate([[0.0], np.cumsum(g)[:-1]])  # sum of the gaps below each one
    caps = (span_s - kept) / (len(g) - np.arange(len(g)))
    return float(caps[np.argmax(caps <= g)])


def _speed_for_span(t: np.ndarray, max_idle_s: float | None, span_s: float) -> float:
    """The smallest speed whose schedule (idle gaps cut) spans at most span_s: bisection on
    the span, which falls as the speed rises."""
    lo, hi = 1e-9, 1.0
    while _span(t, hi, max_idle_s) > span_s:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        if _span(t, mid, max_idle_s) > span_s:
            lo = mid
        else:
            hi = mid
    return hi


def schedule_frame(wl: pd.DataFrame, rate: ReplayRate) -> pd.DataFrame:
    """The workload with its replayed arrival times."""
    return wl.assign(arrival_s=rate.arrival_s)
