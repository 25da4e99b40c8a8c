"""The schedule validate replays a workload at: a fraction of the monolithic capacity.

A trace's mean rate says little about the load a server sees when the trace is bursty (the
Azure code trace's busiest 60 of 300 requests arrive 2.7-19x faster than the window's mean).
So the load is measured where it matters, at the busiest stretch (basis 'peak'): the rate at
which the `PEAK_SHARE` of the requests that arrive closest together come in. Scaling a trace
so that stretch runs at a fraction of capacity leaves long idle gaps elsewhere; a server idle
for ten seconds is as idle as one idle for one, so gaps longer than `max_idle_s` of replay
time are cut to it. Basis 'mean' keeps the plain definition (mean rate over capacity) and the
trace's gaps; a rate given outright ('rate') is a mean rate.

The asked load is kept. Where the schedule must end within `max_span_s` (the time a replay
has in validate's plan), the quiet gaps are cut further, but never below the busiest
stretch's own mean gap at the asked load, and never so far that any stretch runs above the
asked load; where the schedule still does not fit, fewer requests are replayed: the
consecutive requests that fill the span from around the busiest stretch, the load set again
on them (`first`, `requests_total` say which). Raising the rate instead, as validate did
before, replayed long-prompt workloads at 3-10x the asked load, where every latency
measures a backlog. Only a trace whose busiest stretch is one instant (no finite rate) is
sped up as a whole to fit.

The schedule is plain data: the replay and the simulator get the same arrival times.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

PEAK_SHARE = 0.2     # of the requests: the busiest stretch is this many consecutive arrivals
MIN_PEAK_WINDOW = 10
MIN_REQUESTS = 20    # a replay cut to fit its span keeps at least this many (p50s of fewer
                     # than 20 requests move 10-20% between replays of the same schedule)
LOAD_SLACK = 1.02    # a cut schedule's busiest stretch may exceed the asked load by this
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
    first: int = 0        # index of the first replayed request in the workload
    requests_total: int = 0  # requests in the workload (0: all were replayed)

    @property
    def requests(self) -> int:
        return len(self.arrival_s)

    def info(self) -> dict:
        return {"basis": self.basis, "load": self.load, "speed": self.speed,
                "mean_rps": self.mean_rps,
                "peak_rps": self.peak_rps, "mean_load": self.mean_load,
                "peak_load": self.peak_load, "idle_cut_s": self.idle_cut_s,
                "gap_cap_s": self.gap_cap_s,
                "peak_window": self.peak_window, "span_s": float(self.arrival_s[-1]),
                "replayed_requests": self.requests, "first_request": self.first,
                "workload_requests": self.requests_total or self.requests}


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
                max_idle_s: float | None = 1.0, max_span_s: float | None = None,
                min_requests: int = MIN_REQUESTS) -> ReplayRate:
    """The replay schedule of a workload (arrival_s from its first request, ascending).

    rate_rps: replay at this mean rate (the trace's gaps kept), whatever the load.
    load with basis 'peak': the busiest stretch at load * capacity, idle gaps cut to
    max_idle_s; load with basis 'mean': the mean at load * capacity, gaps kept.
    max_span_s: the schedule ends within it (where `min_requests` fit): quiet gaps are cut,
    then fewer requests replayed (module docstring); the load is never raised to fit.
    """
    if basis not in BASES:
        raise ValueError(f"load basis must be one of {', '.join(BASES)}, got {basis!r}")
    t = np.asarray(arrival_s, dtype=float)
    t = t - t[0]
    n = len(t)
    if rate_rps is not None:
        basis = "rate"
    first, count = 0, n
    rate = _schedule(t, capacity_rps, load, basis, rate_rps, max_idle_s, max_span_s)
    for _ in range(12):  # fewer requests, the load set again on them, until the count holds
        if max_span_s is None or rate.arrival_s[-1] <= max_span_s * (1 + 1e-9) \
                or count <= min(min_requests, n):
            break
        sub = t[first:first + count]
        w = peak_window(count)
        i, k = _fullest_window(rate.arrival_s, max_span_s, min(min_requests, n),
                               busiest_start(sub, w) + w // 2)
        if k >= count:
            break
        first, count = first + i, k
        sub = t[first:first + count]
        rate = _schedule(sub - sub[0], capacity_rps, load, basis, rate_rps, max_idle_s, max_span_s)
    from dataclasses import replace
    return replace(rate, first=first, requests_total=n)


def _schedule(t: np.ndarray, capacity_rps: float, load: float | None, basis: str,
              rate_rps: float | None, max_idle_s: float | None,
              max_span_s: float | None) -> ReplayRate:
    """All of t (from 0) at the asked load, quiet gaps cut towards max_span_s as far as the
    load allows."""
    n = len(t)
    mean_trace = (n - 1) / t[-1] if n > 1 and t[-1] > 0 else float("inf")
    window = peak_window(n)
    idle = None
    if basis in ("rate", "mean"):
        target = rate_rps if basis == "rate" else load * capacity_rps
        speed = target / mean_trace if np.isfinite(mean_trace) else 1.0
        sched = t / speed
    else:
        peak_trace = busiest_rate(t, window)
        speed = load * capacity_rps / peak_trace if np.isfinite(peak_trace) else 0.0
        idle = max_idle_s
        if speed > 0:
            gaps = np.diff(t) / speed
            if max_span_s is not None and _span(t, speed, idle) > max_span_s:
                idle = min(idle or np.inf, _cap_for_span(gaps, max_span_s))
            idle = _load_keeping_cap(gaps, idle, load * capacity_rps * LOAD_SLACK, window)
        elif max_span_s is not None and _span(t, speed, idle) > max_span_s:
            speed = _speed_for_span(t, idle, max_span_s)  # one instant: no load to keep
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


def _load_keeping_cap(gaps: np.ndarray, cap: float | None, peak_rps: float,
                      window: int) -> float | None:
    """The lowest cap on the gaps, at least `cap`, under which no `window` consecutive
    arrivals come faster than peak_rps (None: no gap cut). Cutting gaps shorter than the
    asked load's own would make a quiet stretch run above it: on a long-prompt workload,
    whose capacity is a request every few seconds, a 1 s cap alone tripled the load."""
    if cap is None or len(gaps) == 0 or cap >= gaps.max():
        return cap

    def ok(c: float) -> bool:
        return busiest_rate(np.concatenate([[0.0], np.cumsum(np.minimum(gaps, c))]),
                            window) <= peak_rps

    if ok(cap):
        return cap
    lo, hi = cap, float(gaps.max())  # ok() holds uncut (the asked load), fails at lo
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def _fullest_window(sched: np.ndarray, span_s: float, min_count: int,
                    around: int) -> tuple[int, int]:
    """(first index, count) of the consecutive arrivals within span_s of the first that hold
    the most requests (at least min_count); of several, the one nearest request `around`
    (the trace's busiest stretch, which the cut gaps may have evened out)."""
    ends = np.searchsorted(sched, sched + span_s, side="right")
    counts = ends - np.arange(len(sched))
    best = np.flatnonzero(counts == counts.max())
    centre = best + counts[best] / 2
    i = int(best[np.argmin(np.abs(centre - around))])
    k = max(int(counts[i]), min_count)
    i = min(i, len(sched) - k)
    return i, k


def busiest_start(arrival_s: np.ndarray, window: int) -> int:
    """Index of the first of the `window` consecutive arrivals closest together."""
    t = np.asarray(arrival_s, dtype=float)
    w = max(2, min(window, len(t)))
    return int(np.argmin(t[w - 1:] - t[:len(t) - w + 1]))


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
    """The replayed requests of the workload (sorted by arrival) with their replay times."""
    return wl.iloc[rate.first:rate.first + rate.requests].assign(arrival_s=rate.arrival_s)
