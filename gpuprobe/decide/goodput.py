"""Goodput as DistServe defines it: the highest request rate per device at which the SLO is
still met, found on the workload's arrival-rate scale (same mix, same burst shape).

A search brackets the rate scale (doubling or halving from a hint) and bisects it in log
space until the bracket is `precision` wide; the answer is the bracket's low end, a rate the
simulator showed to meet the SLO (never an interpolation). Attainment falls as the rate rises
(more queueing, bigger batches), which is what bisection needs; where the simulator's noise
makes it not quite so, the bracket still holds one meeting and one failing rate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from gpuprobe.perf.metrics import Slo, meets_slo

MIN_SCALE = 2.0 ** -12   # below 1/4096 of the trace's rate: "meets at no rate"
MAX_SCALE = 2.0 ** 12
FIRST_STEP = 1.25  # then 1.56, 2.4, 5.9, 16: a near hint brackets in two runs, a far one soon


@dataclass
class Bracket:
    """lo: the highest rate scale seen to meet the SLO (0: none), hi: the lowest seen to fail
    (inf: none); at_lo: the summary at lo; sims: simulator runs it took."""

    lo: float = 0.0
    hi: float = math.inf
    at_lo: dict | None = None
    at_hi: dict | None = None
    sims: int = 0
    seconds: list = field(default_factory=list)

    def width(self) -> float:
        return self.hi / self.lo if self.lo > 0 and math.isfinite(self.hi) else math.inf


def search(run: Callable[[float], dict], slo: Slo, start: float = 1.0, precision: float = 1.05,
           tries: tuple = (), max_sims: int = 24, out_of_reach: float = 0.0,
           loose: float = 1.5) -> Bracket:
    """Brackets and bisects the rate scale. run(scale) -> summary. start: the first scale to
    try (a hint: the trace's own rate, or a similar candidate's answer); tries: scales to probe
    first instead (a coarser search's bracket), where the answer is expected to lie.
    out_of_reach: a scale below which the answer cannot matter (another candidate is known to
    do better): once the bracket lies wholly below it, `loose` is precision enough."""
    import time
    b = Bracket()

    def probe(scale: float) -> None:
        t = time.perf_counter()
        s = run(scale)
        b.seconds.append(time.perf_counter() - t)
        b.sims += 1
        if meets_slo(s, slo):
            if scale > b.lo:
                b.lo, b.at_lo = scale, s
        elif scale < b.hi:
            b.hi, b.at_hi = scale, s

    for scale in tries or (start,):
        probe(scale)
    step = FIRST_STEP  # a hint is usually close: a short first step, then growing ones
    while b.sims < max_sims and b.lo == 0.0 and b.hi > MIN_SCALE:
        probe(b.hi / step)
        step = min(step * step, 16.0)
    step = FIRST_STEP
    while b.sims < max_sims and not math.isfinite(b.hi) and b.lo < MAX_SCALE:
        probe(b.lo * step)
        step = min(step * step, 16.0)
    while b.sims < max_sims and b.lo > 0 and b.width() > precision:
        if b.hi < out_of_reach and b.width() <= loose:
            break
        probe(math.sqrt(b.lo * b.hi))
    return b
