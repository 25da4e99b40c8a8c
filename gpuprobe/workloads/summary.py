"""Workload summaries, computed streaming so a 5-million-row import never holds its rows.

Quantiles are exact nearest-rank (numpy's "inverted_cdf": the smallest value with at least q of
the requests at or below it). Token counts are integers with few distinct values, so an exact
value -> count table is small; it is what lets the summary stream and still match the figures in
gpuprobe/data/README.md to the token.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

QUANTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))
_BINCOUNT_MAX = 1 << 20  # largest value counted with np.bincount (an 8 MiB histogram at most)


class ValueCounts:
    """Exact distribution of integer values, merged chunk by chunk (memory ~ distinct values)."""

    def __init__(self):
        self._counts: dict[int, int] = {}
        self.total = 0      # sum of values
        self.num = 0        # number of values

    def add(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        low, high = int(values.min()), int(values.max())
        if low >= 0 and high < _BINCOUNT_MAX:  # token counts: a histogram is much cheaper than a sort
            counts = np.bincount(values, minlength=0)
            keys = np.flatnonzero(counts)
            counts = counts[keys]
        else:
            keys, counts = np.unique(values, return_counts=True)
        get = self._counts.get
        for k, c in zip(keys.tolist(), counts.tolist()):
            self._counts[k] = get(k, 0) + c
        self.total += int(values.sum())
        self.num += int(values.size)

    def quantile(self, q: float) -> int | None:
        if not self.num:
            return None
        keys = np.array(sorted(self._counts))
        cum = np.cumsum([self._counts[k] for k in keys])
        rank = int(np.ceil(q * self.num))
        return int(keys[np.searchsorted(cum, max(rank, 1))])

    def quantiles(self) -> dict:
        return {name: self.quantile(q) for name, q in QUANTILES}


class SummaryBuilder:
    """Feed arrival times (seconds) and token counts chunk by chunk; `result(name)` at the end."""

    def __init__(self):
        self.prompt, self.output = ValueCounts(), ValueCounts()
        self.first_s = np.inf
        self.last_s = -np.inf

    def add(self, arrival_s: np.ndarray, prompt_tokens: np.ndarray, output_tokens: np.ndarray) -> None:
        if arrival_s.size:
            self.first_s = min(self.first_s, float(arrival_s.min()))
            self.last_s = max(self.last_s, float(arrival_s.max()))
        self.prompt.add(np.asarray(prompt_tokens, dtype=np.int64))
        self.output.add(np.asarray(output_tokens, dtype=np.int64))

    def result(self, name: str) -> "WorkloadSummary":
        n = self.prompt.num
        span = (self.last_s - self.first_s) if n else 0.0
        return WorkloadSummary(
            name=name, requests=n, span_s=round(span, 6),
            rate_rps=round(n / span, 6) if span > 0 else None,
            prompt_tokens=self.prompt.quantiles(), output_tokens=self.output.quantiles(),
            prompt_output_ratio=round(self.prompt.total / self.output.total, 4) if self.output.total else None)


@dataclass(frozen=True)
class WorkloadSummary:
    """span_s: first to last arrival, seconds; rate_rps: requests / span_s (None for a zero span);
    prompt_output_ratio: total prompt tokens / total output tokens (None when no output tokens)."""
    name: str
    requests: int
    span_s: float
    rate_rps: float | None
    prompt_tokens: dict
    output_tokens: dict
    prompt_output_ratio: float | None

    def to_dict(self) -> dict:
        return {"name": self.name, "requests": self.requests, "span_s": self.span_s,
                "rate_rps": self.rate_rps, "prompt_tokens": dict(self.prompt_tokens),
                "output_tokens": dict(self.output_tokens), "prompt_output_ratio": self.prompt_output_ratio}

    def lines(self) -> list[str]:
        p, o = self.prompt_tokens, self.output_tokens
        rate = f"{self.rate_rps:.3f} req/s" if self.rate_rps is not None else "n/a"
        ratio = f"{self.prompt_output_ratio:.1f} : 1" if self.prompt_output_ratio is not None else "n/a"
        return [f"workload       {self.name}",
                f"requests       {self.requests:,}",
                f"span           {self.span_s:,.1f} s   mean rate {rate}",
                f"prompt tokens  p50 {p['p50']}  p90 {p['p90']}  p99 {p['p99']}",
                f"output tokens  p50 {o['p50']}  p90 {o['p90']}  p99 {o['p99']}",
                f"prompt:output  {ratio}"]


def summarize(df, name: str = "") -> WorkloadSummary:
    """Summary of a workload DataFrame (arrival_s, prompt_tokens, output_tokens)."""
    b = SummaryBuilder()
    b.add(df["arrival_s"].to_numpy(dtype=float), df["prompt_tokens"].to_numpy(), df["output_tokens"].to_numpy())
    return b.result(name)
