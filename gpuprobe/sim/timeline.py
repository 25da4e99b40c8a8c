"""Per-request token statistics from compact token runs: no array with one entry per token.

A simulated request's tokens after its first are runs of consecutive entries of a time axis
(the decode worker's step end times, then its uniform decode steps again; see engine.py).
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
from itertools import pairwise

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


def macro_ends(t0_s: np.ndarray, ctx: np.ndarray, seqs: np.ndarray, length: np.ndarray,
               chain_starts: np.ndarray, coefs: tuple[float, float, float, float, float]
               ) -> np.ndarray:
    """Every step end of a worker's macro-steps, macro-step after macro-step (seconds).

    Macro-step m starts at clock t0_s[m] and takes length[m] decode steps of seqs[m]
    sequences; its step j attends c = ctx[m] + j * seqs[m] KV positions and lasts
    ((d0 + d1 * B) + d2 * c + overhead) * scale, coefs = (d0, d1, d2, overhead, scale).
    chain_starts: the macro-steps (ascending, 0 first) not starting where the one before
    ended. The ends are the engine loop's very floats: the same operations on the same
    doubles, added up one step after the other (np.add.accumulate adds in order, as the loop
    does; a float sum depends on its order).
    """
    if not len(length):
        return np.zeros(0)
    if len(chain_starts) * 16 <= len(length):
        return _chained(t0_s, ctx, seqs, length, chain_starts, coefs)
    return _by_length(t0_s, ctx, seqs, length, coefs)


def _chained(t0_s, ctx, seqs, length, chain_starts, coefs) -> np.ndarray:
    """macro_ends() with few chains: one accumulate along each chain's steps (a macro-step
    that starts where the one before ended continues its sum unchanged)."""
    d0, d1, d2, ovh, scale = coefs
    offset = np.cumsum(length) - length
    B = np.repeat(seqs, length)
    # Step p of macro-step m attends ctx[m] + (p - offset[m]) * B KV positions.
    c = np.repeat(ctx - offset * seqs, length) + np.arange(len(B)) * B
    dt = np.repeat(d0 + d1 * seqs, length) + d2 * c
    if not (ovh == 0 and scale == 1):  # else skipped, as SimEngine skips them
        dt = (dt + ovh) * scale
    out = np.empty_like(dt)
    bounds = offset[chain_starts].tolist() + [len(dt)]
    for a, b, t0 in zip(bounds[:-1], bounds[1:], t0_s[chain_starts].tolist()):
        dt[a] = t0 + dt[a]  # the chain's first step from its start clock: t0 += dt
        np.add.accumulate(dt[a:b], out=out[a:b])
    return out


def _by_length(t0_s, ctx, seqs, length, coefs) -> np.ndarray:
    """macro_ends() with many chains: macro-steps of one length share a 2-D array, one per
    column, so a few NumPy calls per distinct length (at most sqrt(2 * steps) of them)."""
    out = np.empty(int(length.sum()))
    offset = np.cumsum(length) - length
    order = np.argsort(length, kind="stable")
    by_len = length[order]
    bounds = np.flatnonzero(np.r_[True, by_len[1:] != by_len[:-1], True]).tolist()
    for a, b in pairwise(bounds):
        cols = order[a:b]
        j = np.arange(by_len[a])[:, None]  # step j of each macro-step: [L, n]
        B = seqs[cols]
        clock = np.empty((len(j) + 1, b - a))
        clock[0] = t0_s[cols]
        clock[1:] = _step_s(B, ctx[cols] + j * B, coefs)
        np.add.accumulate(clock, axis=0, out=clock)
        out[offset[cols] + j] = clock[1:]
    return out


def _step_s(B: np.ndarray, c: np.ndarray, coefs) -> np.ndarray:
    """A decode step of B sequences attending c KV positions: SimEngine.run()'s macro-step
    formula, operation for operation (x = d0 + d1 * B; (x + d2 * c + overhead) * scale)."""
    d0, d1, d2, ovh, scale = coefs
    return ((d0 + d1 * B) + d2 * c + ovh) * scale
