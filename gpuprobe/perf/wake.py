"""The cost of waking an idle worker: how much longer a request's first token takes when it
reaches a server that has been idle for a while than when it follows the last one back to back.

Measured here (docs/model-log.md, "A wake-up cost after an idle gap"): on an idle monolithic
server a 128-256 token prompt's TTFT grew by about 1-1.5 ms after 100 ms of idle and by 1-3 ms
after 300 ms (cold caches, a descheduled vCPU, a sleeping loop thread); the calibration's sweep
sends each request after the last one's reply, so its fit never sees it. On a GPU, clocks that
drop while idle do the same.

Calibration sends a few prompts of sweep sizes after paused gaps (calibrate.WAKE_GAPS); each
one's excess is its client TTFT less the median TTFT of the same size in the same pass's
back-to-back sweep. The curve is the median excess per gap, pooled where it would fall with
the gap and at least 0, with (0, 0) before it: the simulator charges wake_s(idle gap) when an
input reaches an idle worker (StepCost.wake).
"""
from __future__ import annotations

from bisect import bisect_right

import numpy as np


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
