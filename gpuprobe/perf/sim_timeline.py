"""Per-request token statistics from compact token runs: no array with one entry per token.

A simulated request's tokens after its first are runs of consecutive entries of a time axis
(the decode worker's step end times, then its uniform decode steps again; see sim_engine).
Everything the metrics need follows from the runs with O(runs + steps) array work:
- last_s: the end of the request's last run;
- gaps inside a run are consecutive differences of the time axis, so the pooled inter-token
  gaps are each axis difference counted once per run spanning it, plus one boundary gap per
  run (from the request's previous token);
- tbt_max_s: the largest of those, per run with one segmented max (np.maximum.reduceat).
The gap values are the very floats a per-token computation gives (same subtractions).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TokenStats:
    """Per request (seconds): last_s (first_s when no later token), tbt_max_s (NaN without a
    gap); pooled gaps as distinct-entry values gap_s with how many times each occurs."""

    last_s: np.ndarray
    tbt_max_s: np.ndarray
    gap_s: np.ndarray
    gap_count: np.ndarray


def token_stats(first_s: np.ndarray, times_s: np.ndarray, owner: np.ndarray,
                start: np.ndarray, count: np.ndarray) -> TokenStats:
    """first_s: per request; times_s: the time axis; owner/start/count: int arrays, one entry
    per run, grouped by owner and in time order within an owner; run r covers
    times_s[start[r]:start[r] + count[r]]."""
    last = first_s.copy()
    tbt_max = np.full(len(first_s), np.nan)
    if not len(owner):
        return TokenStats(last, tbt_max, np.zeros(0), np.zeros(0, dtype=np.int64))
    end = start + count - 1  # each run's last token
    is_first = np.r_[True, owner[1:] != owner[:-1]]
    prev = np.where(is_first, first_s[owner], times_s[np.r_[0, end[:-1]]])
    boundary = times_s[start] - prev
    axis_gap = np.r_[np.diff(times_s), -np.inf]  # axis_gap[j] = times_s[j + 1] - times_s[j]
    n_axis = len(times_s)
    spans = np.cumsum(np.bincount(start, minlength=n_axis) - np.bincount(end, minlength=n_axis))
    run_max = boundary.copy()
    inner = np.flatnonzero(count > 1)
    if len(inner):
        inner = inner[np.argsort(start[inner], kind="stable")]
        # Pairs (start, end): even results are max(axis_gap[start:end]); the odd ones fall
        # between runs sorted by start, so all of them together scan the axis about once.
        bounds = np.empty(2 * len(inner), dtype=np.int64)
        bounds[0::2], bounds[1::2] = start[inner], end[inner]
        run_max[inner] = np.maximum(run_max[inner], np.maximum.reduceat(axis_gap, bounds)[0::2])
    np.fmax.at(tbt_max, owner, run_max)
    is_last = np.r_[is_first[1:], True]
    last[owner[is_last]] = times_s[end[is_last]]
    used = spans > 0
    return TokenStats(last, tbt_max, np.r_[axis_gap[used], boundary],
                      np.r_[spans[used], np.ones(len(boundary), dtype=np.int64)])
