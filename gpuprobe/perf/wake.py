"""The cost of waking an idle worker: how much longer a request's first token takes when it
reaches a server that has been idle for a while than when it follows the last one back to back.

Measured here (docs/model-log.md, "A wake-up cost after an idle gap"): on an idle monolithic
server a 128-256 token prompt's TTFT grew by about 1-1.5 ms after 100 ms of idle and by 1-3 ms
after 300 ms (cold caches, a descheduled vCPU, a sleeping loop thread); the calibration's sweep
sends each request after the last one's reply, so its fit never sees it. On a GPU, clocks that
drop while idle do the same.

Calibration sends a few prompts of sweep sizes after paused gaps (calibrate.WAKE_GAPS); each
one's excess is how much longer its prefill step took on the server than the median step of
the same size in the same pass's back-to-back sweep (step_wake_samples; where the server's
rows are not there, as for a client-only profile, its client TTFT less the sweep's median
TTFT of that size, wake_samples). The curve is the median excess per gap, pooled where it
would fall with the gap and at least 0, with (0, 0) before it: the simulator charges
wake_s(idle gap) on the step that an input reaching an idle worker starts (StepCost.wake):
the batch is what is there when it starts, and what comes during it waits for the next step,
as on the server, where the step itself runs slow.

The wake-up is not the same every time: one pass's probes at one gap ranged from nothing to
18 ms over a 5 ms median. A lone request pays about the median, but a burst that reaches an
idle worker queues behind whatever its first step took, so a curve of medians ran the
bursts' TTFTs short (docs/model-log.md, "The wake-up's spread"). wake_spread keeps how far
the probes fell from the curve, as quantiles in seconds; with an rng the simulator adds a
draw from them to each wake-up (never below 0), scaled down with the gap below the first gap
probed as the curve is.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

SPREAD_QUANTILES = 50  # the probes' residuals kept as this many quantiles, (i + 0.5) / 50


def wake_samples(cal: dict) -> list[tuple[float, float]]:
    """[(idle gap s, TTFT excess s)] of one calibration pass's idle probes (cal['wake']) over
    the back-to-back TTFT median of their size (cal['prefill']); probes of a size the sweep
    did not send, or that failed, are left out."""
    base: dict[int, list[float]] = {}
    for r in cal.get("prefill", ()):
        if r.get("status") == "ok" and r.get("ttft_s") is not None:
            base.setdefault(int(r["prompt_tokens"]), []).append(float(r["ttft_s"]))
    out = []
    for r in cal.get("wake", ()):
        ref = base.get(int(r["prompt_tokens"]))
        if ref and r.get("status") == "ok" and r.get("ttft_s") is not None:
            out.append((float(r["idle_s"]), float(r["ttft_s"]) - float(np.median(ref))))
    return out


def step_wake_samples(gaps: list[float], sweep: pd.DataFrame, probes: pd.DataFrame
                      ) -> list[tuple[float, float]]:
    """[(idle gap s, extra prefill-step s)] from the server's rows: each idle probe's prefill
    step (prefill_start_s to prefill_end_s) less the median of the back-to-back sweep's
    one-token requests of its size. gaps: the probes' idle times in the order they were sent
    (one at a time, so the server rows sorted by arrival pair with them); [] when the rows do
    not pair (a count that differs, a column missing): the caller keeps the client's excess.

    Why the step and not the client's TTFT: the rest of a probe's excess (queueing, the front
    and the client waking) was not there in the replays. Requests that reached an idle server
    after 30-300 ms were predicted 16-21% long (monolithic, code windows) with the client's
    excess as the wake-up, while the replays' own first steps after idle ran about as much
    over the curve as the probes' steps did (docs/model-log.md, "The wake-up from the step")."""
    need = {"arrival_s", "prompt_tokens", "output_tokens", "prefill_start_s", "prefill_end_s"}
    if len(probes) != len(gaps) or not gaps or not need <= set(sweep) or not need <= set(probes):
        return []
    one = sweep[sweep["output_tokens"] == 1]
    base = (one["prefill_end_s"] - one["prefill_start_s"]).groupby(one["prompt_tokens"]).median()
    out = []
    for gap, (_, row) in zip(gaps, probes.sort_values("arrival_s").iterrows()):
        ref = base.get(row["prompt_tokens"])
        dur = row["prefill_end_s"] - row["prefill_start_s"]
        if ref is not None and np.isfinite(ref) and np.isfinite(dur):
            out.append((float(gap), float(dur - ref)))
    return out


def fit_wake(samples: list[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """((gap s, wake s), ...) ascending in gap: the median excess at each gap probed, made
    non-decreasing by pooling (a longer idle does not wake faster: where a gap's median falls
    below the one before, the two gaps' samples are pooled and share their median; a running
    maximum instead would lift a flat, noisy curve), then clipped at 0; () without samples."""
    by_gap: dict[float, list[float]] = {}
    for gap, excess in samples:
        by_gap.setdefault(round(gap, 4), []).append(excess)
    gaps = sorted(by_gap)
    blocks = []  # [gaps, samples, median], adjacent violators pooled
    for g in gaps:
        blocks.append([[g], list(by_gap[g]), float(np.median(by_gap[g]))])
        while len(blocks) > 1 and blocks[-1][2] < blocks[-2][2]:
            gs, xs, _ = blocks.pop()
            blocks[-1][0] += gs
            blocks[-1][1] += xs
            blocks[-1][2] = float(np.median(blocks[-1][1]))
    return tuple((float(g), max(0.0, m)) for gs, _, m in blocks for g in gs)


def wake_fn(points: tuple[tuple[float, float], ...], scale: float = 1.0):
    """(idle gap s) -> seconds: linear between (0, 0) and the points, flat after the last;
    None when there are no points or all are 0."""
    if not points or not any(w for _, w in points):
        return None
    gs = [0.0] + [g for g, _ in points]
    ws = [0.0] + [w * scale for _, w in points]
    last = ws[-1]

    def wake_s(gap: float) -> float:
        if gap <= 0:
            return 0.0
        j = bisect_right(gs, gap)
        if j >= len(gs):
            return last
        g0, g1, w0 = gs[j - 1], gs[j], ws[j - 1]
        return w0 + (ws[j] - w0) * (gap - g0) / (g1 - g0)
    return wake_s


def wake_fields(samples: list[tuple[float, float]]) -> dict:
    """StepCost fields from idle probes: {'wake': the curve, 'wake_spread': its spread}."""
    points = fit_wake(samples)
    return {"wake": points, "wake_spread": wake_spread(samples, points)}


def wake_spread(samples: list[tuple[float, float]],
                points: tuple[tuple[float, float], ...]) -> tuple[float, ...]:
    """SPREAD_QUANTILES quantiles (seconds, ascending, any sign) of how far each idle probe's
    excess fell from the fitted curve at its gap; () with fewer than 8 probes or no curve."""
    f = wake_fn(points)
    if f is None or len(samples) < 8:
        return ()
    res = np.array([excess - f(gap) for gap, excess in samples], float)
    q = (np.arange(SPREAD_QUANTILES) + 0.5) / SPREAD_QUANTILES
    return tuple(float(x) for x in np.quantile(res, q))


def spread_wake_fn(points: tuple[tuple[float, float], ...], spread: tuple[float, ...],
                   scale: float, rng: np.random.Generator, chunk: int = 1024):
    """wake_fn(points, scale) plus a seeded draw from `spread` (times scale, and times
    gap / the first gap probed below it), never below 0; wake_fn's when spread is empty."""
    base = wake_fn(points, scale)
    if base is None or not spread:
        return base
    table = np.asarray(spread, float) * scale
    g0 = points[0][0]
    pool: list[float] = []

    def wake_s(gap: float) -> float:
        if gap <= 0:
            return 0.0
        if not pool:
            pool.extend(table[rng.integers(0, len(table), chunk)].tolist())
        w = base(gap) + pool.pop() * min(1.0, gap / g0)
        return w if w > 0.0 else 0.0
    return wake_s
