"""The serving front and the load client share the machine's cores with the engine workers.

On a small CPU machine the front (HTTP, parsing, SSE per token) and the replay client (its
own HTTP and parsing) are not free: at a few hundred tokens per second they use a good part
of a core, and that time is taken from the workers' cores. The cost model's step curves are
measured with almost no front traffic (one prompt at a time, short bursts), so at the
workload's rate each worker step is stretched by the share of its core the front and client
take:

    u        = rate * (cpu_per_request_s + cpu_per_prompt_token_s * prompt_tokens
                       + cpu_per_token_s * tokens_per_request)                     [cores]
    stretch  = 1 / (1 - u / cores)        (the front's demand spread over the cores)

They are measured during calibration, from the CPU seconds of the front process and of the
client per sub-phase: per prompt token from the decode sweep's two prompt lengths (the same
requests and output tokens, prompts 10x apart: prompt_token_cpu), then per request and per
output token from the prefill sweep (requests of one token) against the decode sweep (many
tokens per request), solved for the two unknowns.

Where it lands (predict._contended): for the monolithic worker, the per-request and
per-prompt-token parts are a stall at each arrival that finds the worker busy
(arrival_stalled), the per-token part a stretch of its busy time; for the split layouts'
pinned workers, all are a stretch shared by the cores' idle time (busy_stretch).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

MAX_UTIL = 0.9  # past this the front saturates: the model no longer applies, so cap the stretch


@dataclass(frozen=True)
class FrontCpu:
    """CPU seconds the front and client spend per request, per prompt token (the client
    writes the prompt, the front reads it) and per streamed token."""

    cpu_per_request_s: float = 0.0
    cpu_per_token_s: float = 0.0
    source: str = "default"
    cpu_per_prompt_token_s: float = 0.0

    def cores_used(self, rate_rps: float, tokens_per_request: float,
                   prompt_tokens_per_request: float = 0.0) -> float:
        return rate_rps * (self.cpu_per_request_s + self.cpu_per_token_s * tokens_per_request
                           + self.cpu_per_prompt_token_s * prompt_tokens_per_request)

    def stretch(self, rate_rps: float, tokens_per_request: float, cores: int,
                prompt_tokens_per_request: float = 0.0) -> float:
        """Factor on worker step times at `rate_rps` (>= 1)."""
        u = self.cores_used(rate_rps, tokens_per_request, prompt_tokens_per_request) / max(1, cores)
        return 1.0 / (1.0 - min(u, MAX_UTIL))


def prompt_token_cpu(phases: list[tuple[float, float, float, float]]) -> float:
    """CPU s per prompt token from calibration sub-phases [(requests, prompt tokens, output
    tokens, cpu s)]: over every two that sent the same requests and output tokens with
    different prompts (the decode sweep at each prompt length), the CPU they differ by over
    the prompt tokens they differ by; 0 without such pairs. Measured here: 0.38 s more for
    the 50,400 more prompt tokens of the 320-token decode sweep than of the 32-token one,
    about 7.5 us a token, where a whole sub-phase's CPU is read to 10 ms."""
    groups: dict[tuple[float, float], list[tuple[float, float]]] = {}
    for req, prompt, out, cpu in phases:
        groups.setdefault((req, out), []).append((prompt, cpu))
    d_cpu = d_prompt = 0.0
    for pts in groups.values():
        pts.sort()
        for (p0, c0), (p1, c1) in zip(pts, pts[1:]):
            if p1 > p0:
                d_cpu, d_prompt = d_cpu + c1 - c0, d_prompt + p1 - p0
    return max(0.0, d_cpu / d_prompt) if d_prompt > 0 else 0.0


def fit_front_cpu(phases: list[tuple[float, float, float, float]],
                  per_prompt_token_s: float = 0.0) -> FrontCpu:
    """From [(requests, prompt tokens, output tokens, cpu_s)] per calibration phase, with the
    CPU per prompt token given (prompt_token_cpu): the rest solved for per request and per
    output token; non-negative least squares."""
    A = np.array([[p[0], p[2]] for p in phases], float)
    y = np.array([p[3] - per_prompt_token_s * p[1] for p in phases], float)
    if len(y) < 2 or not np.isfinite(y).all():
        return FrontCpu(cpu_per_prompt_token_s=per_prompt_token_s)
    sol, *_ = np.linalg.lstsq(A, y, rcond=None)
    if (sol < 0).any():  # one term lost in noise: keep the other alone
        per_tok = max(0.0, float(y.sum() / A[:, 1].sum()))
        sol = (np.array([0.0, per_tok]) if sol[1] >= 0
               else np.array([max(0.0, y.sum() / A[:, 0].sum()), 0]))
    return FrontCpu(float(sol[0]), float(sol[1]), "measured", per_prompt_token_s)


def stretched(profile, factor: float | dict[str, float]):
    """`profile` with every worker's step times multiplied by `factor` (or factor[key])."""
    f = factor if isinstance(factor, dict) else dict.fromkeys(profile.workers, factor)
    workers = {k: replace(w, scale=w.scale * f.get(k, 1.0)) for k, w in profile.workers.items()}
    return replace(profile, workers=workers)



def busy_stretch(front: FrontCpu, rate_rps: float, tokens_per_request: float,
                 busy: dict[str, float], pinned: bool,
                 prompt_tokens_per_request: float = 0.0) -> dict[str, float]:
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
    u = front.cores_used(rate_rps, tokens_per_request, prompt_tokens_per_request)
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
    w, wp = front.cpu_per_request_s, front.cpu_per_prompt_token_s
    workers = {k: replace(c, arrival_stall_s=w, arrival_stall_per_token_s=wp)
               for k, c in profile.workers.items()}
    return (replace(profile, workers=workers),
            replace(front, cpu_per_request_s=0.0, cpu_per_prompt_token_s=0.0))
