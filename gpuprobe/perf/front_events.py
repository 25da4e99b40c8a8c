"""Moments the serving front works, and the decode steps they fall in.

A split layout's decode worker shares the machine's cores with the front (HTTP, parsing, a
token streamed per step). Most of the front's work is small and steady, but some comes in
bursts: a request arriving (read, parse, tokenize, forward the prompt to the prefill
worker), a first token leaving the prefill worker (the front streams it and opens the
request's token stream) and a KV import (the decode worker's own loop takes the handed-off
request in). A decode step that one of them falls in runs long, by a draw from a wider
spread than the steps around it (docs/model-log.md, "The front's bursts in the decode
worker's steps"; decode step over the fitted curve, 50th / 90th / 99th percentiles): steps with no such moment 0.74-0.95
/ 1.26-1.53 / 2.1-2.6 in the replays, those an arrival fell in 0.92-1.94 / 2.4-4.2 /
5.2-7.4, a first token 1.0-1.55 / 1.9-2.3 / 4.2-5.6; the calibration's own steps of each
kind spread the same way (first tokens 1.2-1.7 / 1.9-3.2 / 3.6-6.4). Pooled, the
calibration's spread is mostly quiet steps (nine in ten), and a replay at a served rate
holds more of the other kind.

profile_fit splits a decode worker's step noise by this mask (calibration steps and request
rows); the simulator draws a step's noise from the event table when one of the same moments
(the workload's arrivals, the prefill worker's first tokens, its own imports) falls in it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

LEAD_S = 0.0005  # a moment this long before a step's start still lands on it (the front's
                 # turn outlasts the moment it is stamped at)


def event_times(requests: pd.DataFrame | None, layout: str | None = None) -> np.ndarray:
    """Sorted moments the front had a burst of work for `layout`'s requests: every arrival
    and every first token out of a prefill worker (arrival_s, prefill_end_s; seconds on the
    steps' clock). Empty without those columns."""
    if requests is None or not len(requests):
        return np.zeros(0)
    r = requests
    if layout is not None and "layout" in r.columns:
        r = r[r["layout"] == layout]
    cols = [c for c in ("arrival_s", "prefill_end_s") if c in r.columns]
    if not cols:
        return np.zeros(0)
    t = np.concatenate([r[c].to_numpy(float) for c in cols])
    return np.sort(t[np.isfinite(t)])


def in_steps(start_s: np.ndarray, end_s: np.ndarray, events: np.ndarray) -> np.ndarray:
    """Per step [start - LEAD_S, end]: whether an event falls in it."""
    if not len(events):
        return np.zeros(len(start_s), dtype=bool)
    return np.searchsorted(events, end_s, "right") > np.searchsorted(events, start_s - LEAD_S)


def decode_step_events(steps: pd.DataFrame, requests: pd.DataFrame | None) -> np.ndarray:
    """For a decode worker's step rows (start_s, duration_s, num_decode_seqs), in their
    order: whether the front worked in each, by event_times, or the step is the first after
    the batch grew (a KV import just before it)."""
    start = steps["start_s"].to_numpy(float)
    end = start + steps["duration_s"].to_numpy(float)
    layout = steps["layout"].iloc[0] if "layout" in steps.columns and len(steps) else None
    hit = in_steps(start, end, event_times(requests, layout))
    order = np.argsort(start, kind="stable")
    B = steps["num_decode_seqs"].fillna(0).to_numpy(float)[order]
    grew = np.zeros(len(B), dtype=bool)
    grew[order[1:]] = B[1:] > B[:-1]
    return hit | grew
