"""The serving front and the load client share the machine's cores with the engine workers.

On a small CPU machine the front (HTTP, parsing, SSE per token) and the replay client (its
own HTTP and parsing) are not free: at a few hundred tokens per second they use a good part
of a core, and that time is taken from the workers' cores. The cost model's step curves are
measured with almost no front traffic (one prompt at a time, short bursts), so at the
workload's rate each worker step is stretched by the share of its core the front and client
take:

    u        = rate * (cpu_per_request_s + cpu_per_token_s * tokens_per_request)   [cores]
    stretch  = 1 / (1 - u / cores)        (the front's demand spread over the cores)

cpu_per_request_s and cpu_per_token_s are measured during calibration: CPU seconds of the
front process and of the client, over the prefill sweep (requests of one token) and the
decode sweep (many tokens per request), solved for the two unknowns.

Where it lands (validate._contended): for the monolithic worker, the per-request part is a
stall at each arrival that finds the worker busy (arrival_stalled), the per-token part a
stretch of its busy time; for the split layouts' pinned workers, both are a stretch shared
by the cores' idle time (busy_stretch).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

MAX_UTIL = 0.9  # past this the front saturates: the model no longer applies, so cap the stretch


@dataclass(frozen=True)
class FrontCpu:
    """CPU seconds the front and client spend per request and per streamed token."""

    cpu_per_request_s: float = 0.0
    cpu_per_token_s: float = 0.0
    source: str = "default"

    def cores_used(self, rate_rps: float, tokens_per_request: float) -> float:
        return rate_rps * (self.cpu_per_request_s + self.cpu_per_token_s * tokens_per_request)

    def stretch(self, rate_rps: float, tokens_per_request: float, cores: int) -> float:
        """Factor on worker step times at `rate_rps` (>= 1)."""
        u = self.cores_used(rate_rps, tokens_per_request) / max(1, cores)
        return 1.0 / (1.0 - min(u, MAX_UTIL))


def fit_front_cpu(phases: list[tuple[float, float, float]]) -> FrontCpu:
    """From [(requests, tokens, cpu_s)] per calibration phase; non-negative least squares."""
    A = np.array([[p[0], p[1]] for p in phases], float)
    y = np.array([p[2] for p in phases], float)
    if len(y) < 2 or not np.isfinite(y).all():
        return FrontCpu()
    sol, *_ = np.linalg.lstsq(A, y, rcond=None)
    if (sol < 0).any():  # one term lost in noise: keep the other alone
        per_tok = max(0.0, float(y.sum() / A[:, 1].sum()))
        sol = np.array([0.0, per_tok]) if sol[1] >= 0 else np.array([y.sum() / A[:, 0].sum(), 0])
    return FrontCpu(float(sol[0]), float(sol[1]), "measured")


def stretched(profile, factor: float | dict[str, float]):
    """`profile` with every worker's step times multiplied by `factor` (or factor[key])."""
    f = factor if isinstance(factor, dict) else dict.fromkeys(profile.workers, factor)
    workers = {k: replace(w, scale=w.scale * f.get(k, 1.0)) for k, w in profile.workers.items()}
    return replace(profile, workers=workers)



def busy_stretch(front: FrontCpu, rate_rps: float, tokens_per_request: float,
                 busy: dict[str, float], pinned: bool) -> dict[str, float]:
    """Step-time factor per worker from the front's CPU, given each worker's busy fraction.

    busy: worker key -> fraction of the replay the worker spends in steps (a simulation).
    The front's work follows the requests: it parses arrivals and streams tokens while the
    workers are busy, not evenly over the run. So its load during the busy time is
    u / busy (busy: the busiest worker's fraction, standing for the system's busy time).
    pinned=False (one worker on all cores, its threads meeting at every op): front work on
    any core holds the whole step, factor 1 / (1 - u_busy). pinned=True (one core per worker):
    the kernel wakes the front on the core that is idle, so each worker takes the front's
    load in proportion to its core's idle share of the busy time (1 - busy_w / busy).
    """
    u = front.cores_used(rate_rps, tokens_per_request)
    top = max(busy.values(), default=0.0)
    u_busy = u / max(top, u, 1e-9)  # never more than the front's whole demand in a row
    if not pinned:
        return {k: 1.0 / (1.0 - min(u_busy, MAX_UTIL)) for k in busy}
    idle = {k: max(0.0, 1.0 - b / top) if top > 0 else 1.0 for k, b in busy.items()}
    total = sum(idle.values())
    return {k: 1.0 / (1.0 - min(u_busy * (idle[k] / total if total > 0 else 1.0 / len(busy)),
                                MAX_UTIL)) for k in busy}


def arrival_stalled(profile, front: FrontCpu):
    """(profile, front) with the front's per-request CPU moved onto the workers' clocks as a
    stall at each arrival (StepCost.arrival_stall_s), and out of the front's steady load.

    That CPU comes in one burst as each request arrives (the client sends it, the front
    parses it), so it holds up the step in progress, not every step. In the replays'
    monolithic steps, a step with no arrival inside ran on the fit (median excess 0.1-0.2
    ms); one with an arrival ran 3.5-4.5 ms longer at the median and 6-8 ms on average,
    against 5.7-6.2 ms of CPU per request (docs/model-log.md). The per-token part (streaming
    each step's tokens) stays a stretch of the busy time (busy_stretch). Used for the
    unpinned (monolithic) worker, whose threads meet at every op."""
    w = front.cpu_per_request_s
    workers = {k: replace(c, arrival_stall_s=w) for k, c in profile.workers.items()}
    return replace(profile, workers=workers), replace(front, cpu_per_request_s=0.0)
