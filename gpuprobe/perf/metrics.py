"""Latency metrics and SLO attainment, defined once for simulated and measured requests.

Definitions (all seconds), as vLLM's benchmarks, AIConfigurator and guidellm name them:
- ttft_s: first token reaching the client minus the request's arrival.
- TPOT (time per output token), per request: (last token - first token) / (tokens - 1), the
  per-request mean gap (`tbt_mean_s` in the per-request table). Percentiles over requests:
  tpot_p50_s / tpot_p90_s / tpot_p99_s.
- ITL (inter-token latency): every gap between consecutive tokens of every request, pooled
  (token-weighted), as a streaming user feels them. Its percentiles are the summary's
  tbt_p50_s / tbt_p90_s / tbt_p99_s (the name gpuprobe's tables have always used).
- A request meets the SLO when ttft_s <= Slo.ttft_s and its TPOT <= Slo.tpot_s (a one-token
  request meets the TPOT part). The mean, not the request's p99 gap, because a 10-token
  request's p99 is its single worst gap, too noisy to compare measured with predicted.
- throughput_tok_s: output tokens of completed requests / (last token - first arrival).
- offered_goodput_rps_per_device: requests meeting the SLO per second per device at the rate
  the workload was offered (cross 1P1D uses 2 devices). It saturates at the offered rate, so
  it cannot rank layouts that all keep up; the searched figure, the highest rate per device
  at which the SLO is still met (DistServe's goodput), is gpuprobe.decide's
  max_goodput_rps_per_device.
- An SLO is met at a rate when slo_attainment >= Slo.attain and every percentile the SLO
  names is within its target: TTFT's over requests (ttft_pct), TPOT's over requests
  (tpot_pct), ITL's over the pooled gaps (itl_pct, against itl_s) (meets_slo).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

AGG_METRICS = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tbt_p50_s", "tbt_p90_s",
               "tbt_p99_s", "throughput_tok_s")


TPOT_METRICS = ("tpot_p50_s", "tpot_p90_s", "tpot_p99_s")  # percentiles over requests
PERCENTILES = (50, 90, 99)  # the percentiles summarize() reports, so the ones an SLO may name


@dataclass(frozen=True)
class Slo:
    """Latency targets (seconds) and the share of requests that must meet them.

    One set of defaults for simulate, validate's tables and recommend: the `chat` preset
    (gpuprobe.decide.slo, docs/decide.md "SLO presets"). ttft_s / tpot_s: each request's
    targets, which the attainment counts. ttft_pct / tpot_pct: also require that percentile
    over requests to be within its target. itl_s at itl_pct: the percentile of every token gap
    pooled. None: no percentile condition (DistServe's definition: the attainment alone)."""

    ttft_s: float = 2.0
    tpot_s: float = 0.1
    attain: float = 0.9
    ttft_pct: int | None = None
    tpot_pct: int | None = None
    name: str = "custom"
    itl_s: float | None = None
    itl_pct: int | None = None

    def __post_init__(self) -> None:
        if not (self.ttft_s > 0 and self.tpot_s > 0) or (self.itl_s is not None
                                                          and not self.itl_s > 0):
            raise ValueError("SLO targets must be > 0 s")
        if not 0 < self.attain <= 1:
            raise ValueError(f"SLO attainment target must be in (0, 1], got {self.attain}")
        for pct in (self.ttft_pct, self.tpot_pct, self.itl_pct):
            if pct is not None and pct not in PERCENTILES:
                raise ValueError(f"SLO percentile must be one of {PERCENTILES}, got {pct}")
        if (self.itl_s is None) != (self.itl_pct is None):
            raise ValueError("an ITL target needs its percentile (itl_p99=50ms)")

    @property
    def tbt_s(self) -> float:
        """The per-request TPOT target under its older name (readers of stored records)."""
        return self.tpot_s

    def describe(self) -> str:
        """One line in the --slo spelling, e.g. 'ttft_p99 <= 2 s, tpot <= 0.1 s, attain 90%'."""
        def key(name, pct):
            return name if pct is None else f"{name}_p{pct}"
        parts = [f"{key('ttft', self.ttft_pct)} <= {self.ttft_s:g} s",
                 f"{key('tpot', self.tpot_pct)} <= {self.tpot_s:g} s"]
        if self.itl_s is not None:
            parts.append(f"itl_p{self.itl_pct} <= {self.itl_s:g} s")
        return ", ".join(parts) + f", attain {self.attain:.0%}"

    def to_dict(self) -> dict:
        return {"name": self.name, "ttft_s": self.ttft_s, "ttft_pct": self.ttft_pct,
                "tpot_s": self.tpot_s, "tpot_pct": self.tpot_pct, "itl_s": self.itl_s,
                "itl_pct": self.itl_pct, "attain": self.attain,
                "tbt_s": self.tpot_s,  # tpot_s under its older name, for older readers
                "definitions": SLO_DEFINITIONS}

    @classmethod
    def from_dict(cls, d: dict) -> "Slo":
        """From to_dict(), or a record written before TPOT and ITL were told apart: its tbt_s
        was the per-request TPOT target and its tbt_pct the percentile of pooled gaps
        (ITL) held to that same target."""
        ttft, attain, name = float(d["ttft_s"]), float(d.get("attain", 0.9)), str(d.get("name", "custom"))
        if "tpot_s" in d:
            itl = d.get("itl_s")
            return cls(ttft, float(d["tpot_s"]), attain, d.get("ttft_pct"), d.get("tpot_pct"),
                       name, None if itl is None else float(itl), d.get("itl_pct"))
        tbt, pct = float(d["tbt_s"]), d.get("tbt_pct")
        return cls(ttft, tbt, attain, d.get("ttft_pct"), None, name,
                   None if pct is None else tbt, pct)


SLO_DEFINITIONS = {
    "ttft": "time to first token per request; ttft_pct: its percentile over requests",
    "tpot": "time per output token: each request's (last - first token) / (tokens - 1); "
            "tpot_pct: its percentile over requests",
    "itl": "inter-token latency: every gap between tokens of every request, pooled; itl_pct: "
           "its percentile over the pooled gaps (the summary's tbt_pNN_s)",
    "attain": "share of requests meeting both their TTFT and TPOT targets"}


def meets_slo(summary: dict, slo: Slo) -> bool:
    """Whether a summarize() result meets `slo`: attainment at least slo.attain and the named
    percentiles within their targets (a NaN percentile, nothing completed, does not)."""
    if float(summary.get("slo_attainment", 0.0)) < slo.attain - 1e-12:
        return False
    for pct, key, target in ((slo.ttft_pct, "ttft", slo.ttft_s), (slo.tpot_pct, "tpot", slo.tpot_s),
                             (slo.itl_pct, "tbt", slo.itl_s)):
        if pct is not None:
            v = summary.get(f"{key}_p{pct}_s", float("nan"))
            if key != "ttft" and v != v and summary.get("num_completed"):
                continue  # one-token outputs only: no gap to judge, as per request
            if not v <= target:
                return False
    return True


def per_request(arrival_s, first_s, last_s, num_tokens) -> pd.DataFrame:
    """Per-request table; NaN first_s marks a request that never produced a token."""
    arrival_s, first_s, last_s = (np.asarray(x, dtype=float) for x in (arrival_s, first_s, last_s))
    num_tokens = np.asarray(num_tokens)
    with np.errstate(invalid="ignore", divide="ignore"):
        tbt_mean = np.where(num_tokens > 1, (last_s - first_s) / (num_tokens - 1), np.nan)
    return pd.DataFrame({"arrival_s": arrival_s, "output_tokens": num_tokens,
                         "ttft_s": first_s - arrival_s, "e2e_s": last_s - arrival_s,
                         "tbt_mean_s": tbt_mean, "ok": ~np.isnan(first_s)})


def aggregate(req: pd.DataFrame, tbt_gaps_s: np.ndarray, slo: Slo, devices: int = 1) -> dict:
    """Aggregates over a per_request() table and the pooled inter-token gaps."""
    return summarize(req, tbt_summary(tbt_gaps_s), slo, devices)


def tbt_summary(gaps_s: np.ndarray, counts: np.ndarray | None = None,
                total_s: float | None = None) -> dict:
    """tbt_p50_s / tbt_p90_s / tbt_p99_s / tbt_mean_s of pooled gaps (NaN without gaps).

    counts: how many times each gap occurs (the simulator's compact form), percentiles as of
    the expanded array. total_s: the gaps' sum when the caller knows it exactly (telescoped
    per request), so the mean does not depend on the gaps' order.
    """
    gaps_s = np.asarray(gaps_s, dtype=float)
    n = int(counts.sum()) if counts is not None else len(gaps_s)
    if n == 0:
        return {k: float("nan") for k in ("tbt_p50_s", "tbt_p90_s", "tbt_p99_s", "tbt_mean_s")}
    if counts is None:
        p50, p90, p99 = np.percentile(gaps_s, [50, 90, 99])
        mean = total_s / n if total_s is not None else np.mean(gaps_s)
    else:
        p50, p90, p99 = (pooled_percentile(gaps_s, counts, n, p) for p in (50, 90, 99))
        mean = total_s / n if total_s is not None else float(np.dot(gaps_s, counts) / n)
    return {"tbt_p50_s": p50, "tbt_p90_s": p90, "tbt_p99_s": p99, "tbt_mean_s": float(mean)}


def pooled_percentile(values: np.ndarray, counts: np.ndarray, n: int, pct: float) -> float:
    """np.percentile(np.repeat(values, counts), pct) (linear method, its formulas) without
    the repeat (4 M gaps per hour of trace): the two order statistics come from sorting only
    the values in a bracket that a sample proposes and the counts prove. n: counts.sum()."""
    h = (n - 1) * (pct / 100)
    r = int(h)
    t = h - r
    a = b = values
    if len(values) > 8192:
        sample = values[:: len(values) // 2048]
        order = np.argsort(sample, kind="stable")
        cum = np.cumsum(counts[:: len(values) // 2048][order])
        i = int(np.searchsorted(cum, r / n * cum[-1], side="right"))
        lo = sample[order[i - 64]] if i >= 64 else -np.inf
        hi = sample[order[i + 64]] if i + 64 < len(order) else np.inf
        below = int(np.sum(counts, where=values < lo))
        inside = (values >= lo) & (values <= hi)
        if below <= r and min(r + 1, n - 1) < below + int(np.sum(counts, where=inside)):
            a, b, r = values[inside], counts[inside], r - below
        else:
            a, b = values, counts  # the sample misled: sort everything
    else:
        b = counts
    order = np.argsort(a, kind="stable")
    cum = np.cumsum(b[order])
    x0, x1 = a[order[np.searchsorted(cum, [r, r + 1], side="right").clip(max=len(a) - 1)]]
    d = x1 - x0
    return float(x0 + d * t if t < 0.5 else x1 - d * (1 - t))


def summarize(req: pd.DataFrame, tbt: dict, slo: Slo, devices: int = 1) -> dict:
    """Aggregates over a per_request() table, with the TBT figures from tbt_summary()."""
    ok = req[req["ok"]]
    out: dict = {"num_requests": int(len(req)), "num_completed": int(len(ok))}
    if len(ok) == 0:
        return {**out, **{m: float("nan") for m in (*AGG_METRICS, *TPOT_METRICS)},
                "slo_attainment": 0.0,
                "offered_goodput_rps_per_device": 0.0}
    ttft = ok["ttft_s"].to_numpy()
    out["ttft_p50_s"], out["ttft_p90_s"], out["ttft_p99_s"] = np.percentile(ttft, [50, 90, 99])
    out.update(tbt)
    span = float((ok["arrival_s"] + ok["e2e_s"]).max() - req["arrival_s"].min())
    out["span_s"] = span
    out["throughput_tok_s"] = float(ok["output_tokens"].sum() / span) if span > 0 else float("nan")
    tpot = ok["tbt_mean_s"].to_numpy()
    tpot = tpot[~np.isnan(tpot)]
    pcts = np.percentile(tpot, [50, 90, 99]) if len(tpot) else [float("nan")] * 3
    out["tpot_p50_s"], out["tpot_p90_s"], out["tpot_p99_s"] = pcts
    tbt_ok = ok["tbt_mean_s"].isna() | (ok["tbt_mean_s"] <= slo.tpot_s)
    meets = (ok["ttft_s"] <= slo.ttft_s) & tbt_ok
    out["slo_attainment"] = float(meets.sum() / len(req))
    out["offered_goodput_rps_per_device"] = float(meets.sum() / span / devices) if span > 0 else 0.0
    return {k: (float(v) if isinstance(v, (np.floating, float)) else v) for k, v in out.items()}


def gaps_from_token_times(token_times: list[list[float]]) -> np.ndarray:
    """Pooled inter-token gaps from per-request token time lists (any common origin)."""
    parts = [np.diff(np.asarray(t, dtype=float)) for t in token_times if t is not None and len(t) > 1]
    return np.concatenate(parts) if parts else np.zeros(0)


def first_gap_shares(token_times: list[list[float]]) -> dict:
    """What pooled TBT percentiles are made of. A request's first gap (first token to second)
    is unlike its later ones: on a split layout it holds the KV hand-over and the decode
    worker's admission, on a monolithic one the wait behind other prompts' prefills. When
    outputs are short, those gaps are a large share of the pool and decide the p99.

    {'tbt_gaps': gaps pooled, 'tbt_first_share': share that are a request's first gap,
    'tbt_p99_first_share': share of first gaps among the gaps at or above the p99} (NaN
    shares without gaps)."""
    first, later = [], []
    for t in token_times:
        if t is not None and len(t) > 1:
            g = np.diff(np.asarray(t, dtype=float))
            first.append(g[0])
            later.append(g[1:])
    gaps = np.concatenate([np.asarray(first), *later]) if first else np.zeros(0)
    if not len(gaps):
        return {"tbt_gaps": 0, "tbt_first_share": float("nan"), "tbt_p99_first_share": float("nan")}
    top = np.flatnonzero(gaps >= np.percentile(gaps, 99))
    return {"tbt_gaps": int(len(gaps)), "tbt_first_share": len(first) / len(gaps),
            "tbt_p99_first_share": float(np.mean(top < len(first)))}


SIMPLER_FIRST = ("monolithic", "intra", "cross")  # fewer devices and moving parts first
TBT_TOLERANCE = 0.15  # p99 TBTs closer than this (relative) count as equal


def tied_best(summaries: dict[str, dict], tbt_tolerance: float = TBT_TOLERANCE) -> list[str]:
    """The layouts that cannot be told apart from the best, simplest first; a layout that
    completed no request is never among them.

    Highest SLO attainment first: layouts within two standard errors of the top attainment
    (binomial, over num_requests) tie on it. Among those, the lowest p99 TBT: layouts within
    `tbt_tolerance` of the lowest tie on it. A difference smaller than the measurement can
    resolve is no reason to pick the layout with more devices or moving parts.
    """
    summaries = {k: s for k, s in summaries.items() if s.get("num_completed", 1)}
    if not summaries:  # none given, or none served a single request
        return []
    att = {k: float(s.get("slo_attainment", 0.0) or 0.0) for k, s in summaries.items()}
    top = max(att.values())
    n = max(int(s.get("num_requests", 0) or 0) for s in summaries.values())
    margin = _two_se(top, n)
    tied = [k for k in summaries if att[k] >= top - margin - 1e-12]

    def p99(k: str) -> float:
        v = summaries[k].get("tbt_p99_s", float("nan"))
        return float("inf") if v is None or v != v else float(v)
    low = min(p99(k) for k in tied)
    if math.isfinite(low):
        tied = [k for k in tied if p99(k) <= low * (1.0 + tbt_tolerance)]
    rank = {k: i for i, k in enumerate(SIMPLER_FIRST)}
    return sorted(tied, key=lambda k: (rank.get(k, len(rank)), p99(k), k))


def _two_se(p: float, n: int) -> float:
    """Two standard errors of an attainment p over n requests, Agresti-Coull style: two
    successes and two failures added (z = 2), so that 300 of 300 is not certain to the last
    request (the plain p(1-p)/n is 0 at p = 1, and then one late request in 300 decided)."""
    if not n:
        return 0.0
    m = n + 4.0
    q = (p * n + 2.0) / m
    return 2.0 * math.sqrt(q * (1.0 - q) / m)


def pick_best(summaries: dict[str, dict], tbt_tolerance: float = TBT_TOLERANCE) -> str | None:
    """Best layout: highest SLO attainment, then lowest p99 TBT, differences within the
    measurement's resolution ignored (tied_best), then the simplest layout."""
    tied = tied_best(summaries, tbt_tolerance)
    return tied[0] if tied else None


def best_note(summaries: dict[str, dict], best: str | None) -> str | None:
    """What a reader must know about pick_best's answer: that no layout served the workload,
    or that the best meets the SLOs for no request; None when neither."""
    if best is None:
        return "no layout served the workload (no layout completed a request)" if summaries else None
    if summaries[best]["slo_attainment"] == 0.0:
        return (f"no layout meets these SLOs; {best} comes closest "
                f"(p99 TBT {summaries[best].get('tbt_p99_s', float('nan')):.4f} s)")
    return None
