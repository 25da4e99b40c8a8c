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


def stretched(profile, factor: float):
    """`profile` with every worker's step times multiplied by `factor`."""
    workers = {k: replace(w, scale=w.scale * factor) for k, w in profile.workers.items()}
    return replace(profile, workers=workers)
