"""What reaches one simulated worker, in time order: its inputs (sequences, each ready at a
clock time) and the front's bursts of work at each arrival, which hold up a busy worker.

SimEngine.run() asks it at every turn of its loop, so the next input's time, the next burst's
time and the earlier of the two are kept as plain attributes, updated only when one is taken.
"""
from __future__ import annotations

from gpuprobe.engine.sequence import Sequence

NO_INPUT = float("nan")  # after the last input: never <= the clock
INF = float("inf")


class InputFeed:
    """seqs[i] is ready at ready_s[i] (ascending). arrive_s (ascending, or None): when each
    request reached the front, where a burst of stall_s + stall_per_token_s * its prompt
    tokens holds up the worker if it is busy then."""

    __slots__ = ("seqs", "num_inputs", "i", "_ready", "_bursts", "_js", "_stall_s", "_cum",
                 "exhausted", "ready_s", "burst_s", "next_s")

    def __init__(self, ready_s: list[float], seqs: list[Sequence], arrive_s: list[float] | None,
                 stall_s: float, stall_per_token_s: float):
        self.seqs, self.num_inputs, self.i = seqs, len(seqs), 0
        self._ready = [*ready_s, NO_INPUT]  # NO_INPUT ends the taking loop without an index check
        per_tok = stall_per_token_s if arrive_s is not None else 0.0
        self._bursts = [*arrive_s, INF] if (stall_s or per_tok) and arrive_s is not None else [INF]
        self._js, self._stall_s = 0, stall_s
        self._cum = None  # the bursts' running sum, where they differ by prompt
        if per_tok:
            self._cum = cum = [0.0]
            for seq in seqs:
                cum.append(cum[-1] + stall_s + per_tok * seq.num_prompt_tokens)
        self.exhausted = not seqs  # every input taken
        self.ready_s = self._ready[0]  # the next input's time (NO_INPUT after the last)
        self.burst_s = self._bursts[0]  # the next burst's time (INF after the last)
        self.next_s = INF  # the earlier of the two: when the worker next has something new
        self._update()

    def take_ready(self, t: float) -> list[Sequence]:
        """The inputs ready at clock t (call when ready_s <= t)."""
        ready, j = self._ready, self.i
        i = j
        while ready[i] <= t:
            i += 1
        self.i = i
        next_s = self.ready_s = ready[i]
        if i >= self.num_inputs:
            self.exhausted, next_s = True, INF
        # _update(), inline: a call less per input batch (about 1% of sim_bench's figure)
        burst_s = self.burst_s
        self.next_s = burst_s if burst_s < next_s else next_s
        return self.seqs[j:i]

    def take_bursts(self, t: float) -> float:
        """The seconds of the front's bursts due by clock t (call when burst_s <= t)."""
        bursts, j = self._bursts, self._js
        js = j
        while bursts[js] <= t:
            js += 1
        self._js, self.burst_s = js, bursts[js]
        self._update()
        return self._stall_s * (js - j) if self._cum is None else self._cum[js] - self._cum[j]

    def _update(self) -> None:
        next_s = self.ready_s if not self.exhausted else INF
        self.next_s = self.burst_s if self.burst_s < next_s else next_s
