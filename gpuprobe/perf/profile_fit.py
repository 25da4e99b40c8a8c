"""Fit a worker's StepCost from step records (the server's `steps` rows), and links from
request records (kv_handoff_s vs kv_handoff_bytes).

Step records carry the step's token sum T, its prompt count k and (store schema 4 on) the
prefill attention work Q and the decodes' padded KV positions. Older records lack the last
two: Q is then taken as T^2/k (exact for one prompt, or k prompts of equal length as in a
calibration burst) and the decode attention as paged.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from gpuprobe.perf.costmodel import (
    BATCHED_PREFILL_TERMS,
    DECODE_TERMS,
    NOISE_QUANTILES,
    PREFILL_TERMS,
    Link,
    StepCost,
)
from gpuprobe.perf.fit import least_squares
from gpuprobe.perf.front_events import decode_step_events
from gpuprobe.perf.noise_fit import split_step_noise, step_noise

MIN_GAP_GROUP = 3  # gaps of one shape before its statistic is fitted (step_gap_fit)
GAP_QUANTILE = 25  # of each shape's busy gaps: the worker's own loop, not the front's turns
STEP_COLS = ("duration_s", "num_prefill_tokens", "num_decode_seqs", "num_decode_ctx_tokens")


def fit_worker(steps: pd.DataFrame, what: str = "worker", threads: int | None = None,
               requests: pd.DataFrame | None = None) -> StepCost:
    """StepCost from one worker's steps (columns STEP_COLS, plus start_s for the overhead);
    requests: the server's request rows of the same run, which tell a busy gap from an idle
    one (step_gap_fit)."""
    missing = [c for c in STEP_COLS if c not in steps.columns]
    if missing:
        raise ValueError(f"{what}: step records lack {missing}")
    s = steps.fillna({c: 0 for c in STEP_COLS[1:]})
    T = s["num_prefill_tokens"].to_numpy(float)
    B = s["num_decode_seqs"].to_numpy(float)
    attention = decode_attention_of(s)
    C = _decode_positions(s, attention)
    y = s["duration_s"].to_numpy(float)
    pre, dec, mix = (T > 0) & (B == 0), (B > 0) & (T == 0), (T > 0) & (B > 0)
    # Medians per size, then least squares: a step stalled by another process on a shared
    # machine is an outlier of a size, and must not tilt the curve.
    k = s["num_prefill_seqs"].fillna(1).clip(lower=1).to_numpy(float) if "num_prefill_seqs" in s \
        else np.ones(len(s))
    Q = _prefill_q(s, T, k)
    Tp, yp = _medians(np.c_[T[pre], k[pre]], y[pre], np.c_[T[pre], k[pre], Q[pre]])
    Xp = np.c_[np.ones(len(Tp)), Tp[:, 0], Tp[:, 2], Tp[:, 1]]
    if len(Tp) and np.ptp(Tp[:, 1]) == 0:  # one prompt per step only: no per-prompt term
        prefill = least_squares(Xp[:, :3], yp, PREFILL_TERMS, Tp[:, 0], f"{what} prefill",
                                relative=True)
    else:
        prefill = least_squares(Xp, yp, BATCHED_PREFILL_TERMS, Tp[:, 0], f"{what} prefill",
                                relative=True)
    c_bin = np.round(C[dec] / np.maximum(B[dec], 1) / 32.0)  # positions per sequence, 32-token bins
    Xd, yd = _medians(np.c_[B[dec], c_bin], y[dec], np.c_[B[dec], C[dec]])
    decode = least_squares(np.c_[np.ones(len(yd)), Xd[:, 0], Xd[:, 1]], yd,
                           DECODE_TERMS, Xd[:, 0], f"{what} decode", relative=True)
    gap0, per_token, before_prefill = step_gap_fit(steps, requests)
    # Handing each token to the front (postprocess, pickling, the pipe) happens between steps:
    # it is charged per decoding sequence (d1) and per prompt (e, else a), in step-time units;
    # the longer gap before a prefill step, to the prefill intercept.
    pc = list(prefill.coef)
    pc[3 if len(pc) > 3 else 0] += per_token  # per prompt where the fit has that term
    pc[0] += before_prefill
    prefill = replace(prefill, coef=tuple(pc))
    decode = replace(decode, coef=(decode.coef[0], decode.coef[1] + per_token, decode.coef[2]))
    i0, i1 = import_fit(steps, gap0, per_token)  # a decode worker takes no prompts in
    if _is_decode_worker(s):  # its steps the front's bursts fell in spread wider
        quiet, busy = split_step_noise(y[dec], np.c_[B[dec], c_bin],
                                       decode_step_events(s, requests)[dec])
    else:
        quiet, busy = step_noise(y[dec], np.c_[B[dec], c_bin]), ()
    cost = StepCost(prefill=prefill, decode=decode, threads=threads, step_overhead_s=gap0,
                    import_s=i0, import_per_token_s=i1, decode_attention=attention,
                    prefill_noise=step_noise(y[pre], np.c_[T[pre], k[pre]]),
                    decode_noise=quiet, decode_event_noise=busy)
    if mix.sum() >= 3:
        f = cost.step_fn()
        base = np.array([f(t, q, b, c, n) - cost.step_overhead_s
                         for t, q, n, b, c in zip(T[mix], Q[mix], k[mix], B[mix], C[mix])])
        ratio = y[mix] / np.maximum(base, 1e-9)
        cost = replace(cost, mixed_factor=float(np.median(ratio)), mixed_source="measured")
    return cost


def _is_decode_worker(steps: pd.DataFrame) -> bool:
    """A split layout's decode worker, with the columns to place its steps in time."""
    return ("role" in steps.columns and "start_s" in steps.columns and len(steps) > 0
            and (steps["role"] == "decode").all())


def decode_attention_of(steps: pd.DataFrame) -> str:
    """'padded' when the records carry the KV positions each decode step's attention call
    read (num_decode_padded_tokens: B x the longest context, the reference runner's one
    padded call), else 'paged' (records from before the column, or from an engine that
    does not write it).

    Not read off whether those positions exceed the contexts' sum: that only says whether
    a step's contexts differed. A monolithic worker's calibration bursts prefill B equal
    prompts together, so their contexts never differ; that test called the worker paged
    in 41 of 54 runs and padded in 13, by chance, while its replays read B x the longest."""
    if "num_decode_padded_tokens" not in steps.columns:
        return "paged"
    P = steps["num_decode_padded_tokens"].to_numpy(float)
    seen = np.isfinite(P) & (steps["num_decode_seqs"].to_numpy(float) > 0)
    return "padded" if seen.any() else "paged"


def _decode_positions(s: pd.DataFrame, attention: str) -> np.ndarray:
    """The decode term's C per step: padded positions where the worker pads (and the row has
    them), the sum of the contexts otherwise."""
    C = s["num_decode_ctx_tokens"].to_numpy(float)
    if attention != "padded":
        return C
    P = s["num_decode_padded_tokens"].to_numpy(float)
    return np.where(np.isfinite(P), P, C)


def _prefill_q(s: pd.DataFrame, T: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Q per step: recorded, else T^2/k (exact for k equal whole prompts)."""
    guess = T ** 2 / k
    if "prefill_q_tokens2" not in s.columns:
        return guess
    Q = s["prefill_q_tokens2"].to_numpy(float)
    return np.where(np.isfinite(Q) & (Q > 0), Q, guess)


def _medians(keys: np.ndarray, y: np.ndarray, x: np.ndarray | None = None,
             q: float | None = None):
    """Group rows by `keys`; per group the median of `x` (default: the keys) and of y (its
    q-th percentile when q is given)."""
    x = keys if x is None else x
    if len(y) == 0:
        return x[:0].astype(float), y[:0]
    _, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.ravel()
    groups = range(inv.max() + 1)
    stat = np.median if q is None else (lambda v: np.percentile(v, q))
    xs = np.array([np.median(x[inv == g], axis=0) for g in groups], dtype=float)
    ys = np.array([stat(y[inv == g]) for g in groups], dtype=float)
    return xs, ys


def step_gap_fit(steps: pd.DataFrame, requests: pd.DataFrame | None = None
                 ) -> tuple[float, float, float]:
    """(fixed s, s per token out, s before a prefill step) of the gap after a busy step, from
    each shape's GAP_QUANTILE-th percentile, shape = (tokens out, whether the next step
    prefills).

    The gap is two-state on a machine whose cores the front shares: 0.1-0.3 ms when the
    front takes the step's message on another core, 0.7-1.5 ms when it runs on this
    worker's core first. How often the second happens depends on the load (a third to two
    thirds of a calibration's decode gaps, a tenth to a third of a served conversation
    trace's), and the front's CPU at the served load is charged apart (contention.py), so
    the fit takes the loop's own gap, the fast state: the 25th percentile of each shape. Its
    median had put 0.3-0.4 ms of calibration's contention into every simulated decode step,
    and the split layouts' TBT p50 came out 10-30% long (docs/model-log.md).

    Tokens out of a step: its decoding sequences plus its prefills (each gives a first token).
    A gap before a step that prefills is longer by about a fixed amount (the loop takes the
    prompts in from the front and the scheduler admits them before the step's clock starts;
    measured on the monolithic tiny worker: 1.1-1.4 ms for 1 prompt and for 6, against
    0.2-0.4 ms between its decode steps). Without that term the per-step overhead was fitted
    to those gaps, so every predicted decode step, and the TBT p50, came out about 1 ms long.
    A gap before a step that only prefills counts only when its prompts had reached the server
    before the gap began (requests: arrival_s and prefill_start_s, the start of the step that
    took them): otherwise the worker was idle, waiting for them (the client's round trip in
    calibration's one-at-a-time sweep; the next arrival in served traffic, where such waits
    of a few ms are most of the gaps).
    """
    if "start_s" not in steps.columns or len(steps) < 3:
        return 0.0, 0.0, 0.0
    s = steps.sort_values("start_s")
    gaps = s["start_s"].to_numpy()[1:] - (s["start_s"] + s["duration_s"]).to_numpy()[:-1]
    n_pre = s["num_prefill_seqs"] if "num_prefill_seqs" in s else (s["num_prefill_tokens"] > 0)
    n_pre = n_pre.fillna(0).to_numpy(float)
    n_out = (s["num_decode_seqs"].fillna(0).to_numpy(float) + n_pre)[:-1]
    to_prefill = (s["num_prefill_tokens"].fillna(0).to_numpy(float) > 0)[1:].astype(float)
    busy = (gaps >= 0) & (gaps < 0.02)
    if "role" in s and (s["role"] == "decode").all():
        # A decode worker imports handed-off KV between steps: a per-request cost, so gaps
        # before a step that grew the batch are left out of the per-token slope.
        B = s["num_decode_seqs"].fillna(0).to_numpy(float)
        busy &= B[1:] <= B[:-1]
    busy &= _inputs_waiting(s, requests)
    if busy.sum() < 3:
        return 0.0, 0.0, 0.0
    keys = np.c_[n_out[busy], to_prefill[busy]]
    xs, ys = _medians(keys, gaps[busy], q=GAP_QUANTILE)
    # Shapes seen once or twice (a burst's odd last step) are a gap each, not a statistic: one
    # of 5.4 ms, weighed like 44 gaps of 0.3 ms, had lifted the monolithic worker's fit.
    _, counts = np.unique(keys, axis=0, return_counts=True)
    if (counts >= MIN_GAP_GROUP).sum() >= 2:
        xs, ys = xs[counts >= MIN_GAP_GROUP], ys[counts >= MIN_GAP_GROUP]
    X = np.c_[np.ones(len(xs)), xs]
    # A term that never varies (a prefill worker: every next step prefills) is the intercept's.
    keep = [0] + [j for j in (1, 2) if np.ptp(xs[:, j - 1]) > 0]
    if len(keep) == 3 and np.linalg.matrix_rank(X) < 3:
        keep = [0, 1]
    if len(xs) < 2 or len(xs) < len(keep):
        return float(np.percentile(gaps[busy], GAP_QUANTILE)), 0.0, 0.0
    fit = least_squares(X[:, keep], ys, tuple(("1", "tokens", "prefill next")[j] for j in keep),
                        xs[:, 0], "step gap")
    coef = dict(zip(keep, fit.coef))
    return float(coef[0]), float(coef.get(1, 0.0)), float(coef.get(2, 0.0))


def _inputs_waiting(s: pd.DataFrame, requests: pd.DataFrame | None) -> np.ndarray:
    """Per gap between consecutive steps of s (sorted by start_s): False when the next step
    only prefills and none of its prompts had arrived when the gap began; True otherwise, and
    everywhere without request rows to tell."""
    n = len(s) - 1
    if (requests is None or not len(requests) or n < 1
            or not {"arrival_s", "prefill_start_s"} <= set(requests.columns)):
        return np.ones(max(n, 0), dtype=bool)
    r = requests.dropna(subset=["arrival_s", "prefill_start_s"])
    first_arrival = r.groupby("prefill_start_s")["arrival_s"].min()
    start = s["start_s"].to_numpy()
    end = start + s["duration_s"].to_numpy()
    arrived = first_arrival.reindex(start[1:]).to_numpy()  # NaN: no request started there
    prefill_only = (s["num_decode_seqs"].fillna(0).to_numpy()[1:] == 0)
    idle = prefill_only & (np.nan_to_num(arrived, nan=-np.inf) > end[:-1])
    return ~idle


def import_fit(steps: pd.DataFrame, gap0: float, per_token: float) -> tuple[float, float]:
    """(s per admitted request, s per its KV token) a decode worker spends importing handed-off
    KV between steps: the gap before a step whose batch grew, beyond the usual loop gap
    (gap0 + per_token * tokens out), against the requests it gained (at least the growth) and
    their context (the next step's context per sequence). (0, 0) for other roles or too few
    growth steps."""
    if not _is_decode_worker(steps) or len(steps) < 4:
        return 0.0, 0.0
    s = steps.sort_values("start_s")
    start, dur = s["start_s"].to_numpy(), s["duration_s"].to_numpy()
    gaps = start[1:] - (start + dur)[:-1]
    B = s["num_decode_seqs"].fillna(0).to_numpy(float)
    C = s["num_decode_ctx_tokens"].fillna(0).to_numpy(float)
    n = B[1:] - B[:-1]
    # A step after an idle wait has gap = wait, not import: only a worker that kept stepping.
    grew = (n > 0) & (B[:-1] > 0) & (gaps >= 0) & (gaps < 0.1)
    if grew.sum() < 3:
        return 0.0, 0.0
    excess = gaps[grew] - (gap0 + per_token * B[:-1][grew])
    n, per_seq = n[grew], C[1:][grew] / np.maximum(B[1:][grew], 1)
    X = np.c_[n, n * per_seq]
    if np.ptp(per_seq) <= 0:
        X = X[:, :1]
    fit = least_squares(X, excess, ("requests", "tokens")[:X.shape[1]], n, "KV import")
    i0, *rest = fit.coef
    return max(0.0, float(i0)), max(0.0, float(rest[0])) if rest else 0.0


def recv_fit(requests: pd.DataFrame) -> tuple[float, float]:
    """(s per request, s per prompt token) of receive-thread CPU per handed-off KV, from the
    requests' kv_recv_cpu_s: medians per half-octave of prompt length, then least squares.
    (0, 0) without such rows (intra receives in the loop, so its steps' gaps hold that cost)."""
    if "kv_recv_cpu_s" not in requests.columns:
        return 0.0, 0.0
    r = requests.dropna(subset=["kv_recv_cpu_s", "prompt_tokens"])
    if len(r) < 3:
        return 0.0, 0.0
    tokens = r["prompt_tokens"].to_numpy(float).clip(min=1)
    xs, ys = _medians(np.round(2 * np.log2(tokens))[:, None], r["kv_recv_cpu_s"].to_numpy(float),
                      tokens[:, None])
    if len(xs) < 2:
        return float(ys[0]), 0.0
    fit = least_squares(np.c_[np.ones(len(xs)), xs[:, 0]], ys, ("1", "tokens"), xs[:, 0],
                        "KV receive")
    r0, r1 = fit.coef
    if r1 < 0:  # no growth with size seen: a flat cost
        return float(np.median(ys)), 0.0
    return max(0.0, float(r0)), float(r1)


HANDOFF_QUANTILE = 10  # percent; see fit_link
MIN_LONE_HANDOFFS = 6  # lone handoffs needed to fit the link on them alone


def fit_link(requests: pd.DataFrame, source: str = "measured", admit=None) -> Link | None:
    """latency + bytes / bandwidth (and the spread about it) from requests with kv_handoff_s
    and kv_handoff_bytes. admit: the decode worker's StepCost.import_fn(), (prompt tokens) ->
    seconds of import and receive.

    The recorded handoff time runs from the prefill worker's send to the end of the decode
    worker's import, so it holds that import (and a cross worker's receive), which the
    simulator charges at admission (admit: taken off each handoff, at least a tenth of it
    left), and the wait behind other handoffs and behind the decode worker's running step,
    which the simulator models itself (the decode worker admits handed-off requests at step
    boundaries). So the link is fitted to lone handoffs, made with nothing else in flight
    (lone_handoffs: calibration's idle probes and single-stream bursts): the median per size
    (half-octave bins of bytes), and the spread as quantiles of each lone handoff over the
    line. Measured (intra, tiny model): lone handoffs
    took 3.1-3.7 ms where the 10th percentile of all of a calibration's, mostly queued in
    bursts of up to 64, was 6-8 ms. With fewer than MIN_LONE_HANDOFFS lone ones (a store
    from a loaded server) the link is fitted to the 10th percentile per size of all of them,
    the least queued, and has no spread.
    """
    if "kv_handoff_s" not in requests.columns:
        return None
    r = requests.dropna(subset=["kv_handoff_s", "kv_handoff_bytes"])
    r = r[r["kv_handoff_bytes"] > 0]
    if len(r) < 3:
        return None
    if admit is not None and "prompt_tokens" in r.columns:
        h = r["kv_handoff_s"].to_numpy(float)
        own = np.array([admit(n) for n in r["prompt_tokens"].fillna(0).to_numpy(float)])
        r = r.assign(kv_handoff_s=np.maximum(h - own, 0.1 * h))
    lone = r[lone_handoffs(r, requests)]
    if len(lone) >= MIN_LONE_HANDOFFS:
        link = _link_line(lone, 50, source, min_bin=1)
        ratio = lone["kv_handoff_s"].to_numpy(float) / link.seconds(
            lone["kv_handoff_bytes"].to_numpy(float))
        ratio = ratio[np.isfinite(ratio) & (ratio > 0)]
        if len(ratio) >= MIN_LONE_HANDOFFS:
            q = np.quantile(ratio, (np.arange(NOISE_QUANTILES) + 0.5) / NOISE_QUANTILES)
            link = replace(link, spread=tuple(float(v) for v in np.maximum.accumulate(q)))
        return link
    return _link_line(r, HANDOFF_QUANTILE, source, min_bin=3 if len(r) >= 9 else 1)


def _link_line(r: pd.DataFrame, pct: float, source: str, min_bin: int) -> Link:
    """The line through the pct-th percentile handoff time of each half-octave bin of bytes
    (bins with at least min_bin handoffs); flat where sizes do not spread or it would fall."""
    size_bin = np.round(2 * np.log2(r["kv_handoff_bytes"].to_numpy(float)))
    xs, ys = [], []
    for b in np.unique(size_bin):
        g = r[size_bin == b]
        if len(g) >= min_bin:
            xs.append(float(g["kv_handoff_bytes"].median()))
            ys.append(float(np.percentile(g["kv_handoff_s"], pct)))
    x, y = np.array(xs), np.array(ys)
    if len(x) < 2 or np.ptp(x) <= 0:
        return Link(float(np.min(y)) if len(y) else float(r["kv_handoff_s"].min()), 1e12, source)
    fit = least_squares(np.c_[np.ones(len(x)), x], y, ("1", "bytes"), x, "handoff")
    lat, per_byte = fit.coef
    if per_byte <= 0 or lat < 0:  # no growth with size seen (or a line below 0): flat
        return Link(float(np.median(y)), 1e12, source)
    return Link(float(lat), 1.0 / per_byte, source)


def lone_handoffs(handoffs: pd.DataFrame, requests: pd.DataFrame) -> np.ndarray:
    """Which handoffs (rows of `handoffs`, with prefill_end_s and kv_handoff_s) ran while no
    other request of `requests` was in flight (between its arrival_s and finish_s; one with
    no finish yet counts as in flight to the end). Without those columns: none."""
    need = {"arrival_s", "finish_s", "prefill_end_s"}
    if not need <= set(requests.columns) or not need <= set(handoffs.columns):
        return np.zeros(len(handoffs), bool)
    rq = requests.dropna(subset=["arrival_s"])
    a = rq["arrival_s"].to_numpy(float)
    f = rq["finish_s"].to_numpy(float)
    f = np.where(np.isnan(f), np.inf, f)
    h0 = handoffs["prefill_end_s"].to_numpy(float)
    h1 = h0 + handoffs["kv_handoff_s"].to_numpy(float)
    # intervals [a, f] overlapping [h0, h1]: started before h1, less those that finished by h0
    overlap = np.searchsorted(np.sort(a), h1, "left") - np.searchsorted(np.sort(f), h0, "right")
    own_a = handoffs["arrival_s"].to_numpy(float)
    own_f = handoffs["finish_s"].to_numpy(float)
    own = (own_a < h1) & ~(np.where(np.isnan(own_f), np.inf, own_f) <= h0)
    return ~np.isnan(h0) & (overlap - own == 0)
