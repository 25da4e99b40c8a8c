"""Admission control: refuse with 429 what the server would only queue for too long.

Two limits, checked for each new request on the front's event loop:
- in flight: at most max_num_seqs + max_queue requests admitted and not finished;
- predicted wait: a request that would wait more than max_queue_wait_s for its first token is
  refused. The wait is predicted as (requests waiting for a first token + 1) x the recent time
  between first tokens while requests were waiting (an EWMA; while none wait, a request's own
  time to first token). Nothing is refused while no request waits, so a burst after an idle
  spell is never judged by an old estimate.
Retry-After says when the prediction falls back under the limit (whole seconds, at least 1).
"""

from __future__ import annotations

import math

from gpuprobe.server.openai_api import ApiError

EWMA_WEIGHT = 0.2  # of the newest interval: about the last 5-10 first tokens count


class Admission:
    def __init__(self, max_in_flight: int, max_queue_wait_s: float | None):
        self.max_in_flight = max_in_flight
        self.max_queue_wait_s = max_queue_wait_s or None  # 0 or None: no wait limit
        self.interval_s: float | None = None  # EWMA of the time between first tokens
        self._last_first_s: float | None = None

    def on_first_token(self, arrival_s: float, now_s: float) -> None:
        """A request got its first token at now_s: fold the interval since the previous first
        token (or since its own arrival, if later) into the estimate."""
        start = max(arrival_s, self._last_first_s or arrival_s)
        interval = max(0.0, now_s - start)
        self._last_first_s = now_s
        self.interval_s = interval if self.interval_s is None else (
            (1 - EWMA_WEIGHT) * self.interval_s + EWMA_WEIGHT * interval)

    def predicted_wait_s(self, waiting: int) -> float:
        """Seconds a request arriving now would wait for its first token."""
        return (waiting + 1) * (self.interval_s or 0.0)

    def check(self, in_flight: int, waiting: int) -> None:
        """Raise ApiError 429 (retry_after_s set) when the request must be refused."""
        if in_flight >= self.max_in_flight:
            raise ApiError(f"server overloaded: {in_flight} requests in flight, the limit is "
                           f"{self.max_in_flight} (--max-num-seqs + --max-queue)", None, 429,
                           "rate_limit_error", code="max_in_flight",
                           retry_after_s=max(1, math.ceil(self.interval_s or 1.0)))
        if self.max_queue_wait_s is None or waiting == 0:
            return
        wait = self.predicted_wait_s(waiting)
        if wait > self.max_queue_wait_s:
            raise ApiError(f"server overloaded: {waiting} requests wait for a first token, a "
                           f"predicted {wait:.1f} s; the limit is {self.max_queue_wait_s:g} s "
                           f"(--max-queue-wait)", None, 429, "rate_limit_error",
                           code="max_queue_wait",
                           retry_after_s=max(1, math.ceil(wait - self.max_queue_wait_s)))
