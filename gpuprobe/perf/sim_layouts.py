"""Wire simulated workers into a layout: monolithic, intra (split on one device), cross.

monolithic: one 'mixed' worker. intra / cross: a 'prefill' worker whose finished prefills
reach a 'decode' worker after the KV handoff (latency + bytes / bandwidth of the layout's
link). The prefill worker never waits on the decode worker (it exports and frees the KV), so
the prefill worker is simulated first and its output times become the decode worker's inputs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuprobe.engine.scheduler import SchedulerConfig
from gpuprobe.engine.sequence import SamplingParams, Sequence
from gpuprobe.perf.costmodel import Profile
from gpuprobe.perf.sim_engine import SimEngine

LAYOUTS = ("monolithic", "intra", "cross")
DEVICES = {"monolithic": 1, "intra": 1, "cross": 2}


@dataclass(frozen=True)
class LayoutConfig:
    """Scheduler settings per role (the server's defaults unless the caller passes its own)."""

    mixed: SchedulerConfig = field(default_factory=lambda: SchedulerConfig(role="mixed"))
    prefill: SchedulerConfig = field(default_factory=lambda: SchedulerConfig(role="prefill"))
    decode: SchedulerConfig = field(default_factory=lambda: SchedulerConfig(role="decode"))


@dataclass
class RawTimes:
    """Per-request engine results, times in seconds on the workload's clock.

    first_s: when the client gets the first token (NaN if rejected); ends/runs: the decode
    worker's step ends and each request's (first step, count) runs for its later tokens.
    """

    first_s: np.ndarray
    ends: np.ndarray
    runs: list[list[int] | None]
    token_out_s: float
    stats: dict


def _sequences(prompt_tokens: np.ndarray, output_tokens: np.ndarray) -> list[Sequence]:
    seqs = []
    prompts: dict[int, list[int]] = {}
    for i, (p, o) in enumerate(zip(prompt_tokens.tolist(), output_tokens.tolist())):
        p, o = max(1, int(p)), max(1, int(o))
        ids = prompts.get(p)
        if ids is None:
            ids = prompts[p] = [1] * p
        # ignore_eos: the trace says how many tokens each request produced.
        seqs.append(Sequence(str(i), ids, SamplingParams(max_tokens=o, ignore_eos=True)))
    return seqs


def run_layout(layout: str, arrival_s: np.ndarray, prompt_tokens: np.ndarray,
               output_tokens: np.ndarray, profile: Profile, config: LayoutConfig) -> RawTimes:
    """Simulate one layout; arrays are per request, arrival_s sorted ascending."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    ovh = profile.overhead
    seqs = _sequences(prompt_tokens, output_tokens)
    in_s = ovh.request_in_s + (ovh.split_in_s if layout != "monolithic" else 0.0)
    inputs = [(float(a) + in_s, s) for a, s in zip(arrival_s.tolist(), seqs)]
    if layout == "monolithic":
        eng = SimEngine(config.mixed, profile.worker(layout, "mixed"))
        eng.run(inputs)
        first_eng, dec = eng, eng
        stats = _stats(eng, "monolithic")
    else:
        pre = SimEngine(config.prefill, profile.worker(layout, "prefill"))
        pre.run(inputs)
        link, kvb = profile.link(layout), profile.kv_bytes_per_token
        handed = [(t + link.seconds(kvb * s.num_computed_tokens), s) for t, s in pre.prefilled]
        handed.sort(key=lambda x: x[0])
        dec = SimEngine(config.decode, profile.worker(layout, "decode"))
        dec.run(handed)
        first_eng = pre
        stats = {**_stats(pre, "prefill"), **_stats(dec, "decode")}
    n = len(seqs)
    first = np.full(n, np.nan)
    for sid, t in first_eng.first_s.items():
        first[int(sid)] = t + ovh.token_out_s
    runs: list = [None] * n
    for sid, r in dec.runs.items():
        runs[int(sid)] = r
    rejected = {s.seq_id for e in {first_eng, dec} for s in e.rejected}
    for sid in rejected:
        first[int(sid)] = np.nan
        runs[int(sid)] = None
    stats["num_rejected"] = len(rejected)
    return RawTimes(first, np.asarray(dec.ends, dtype=float), runs, ovh.token_out_s, stats)


def _stats(eng: SimEngine, name: str) -> dict:
    return {f"{name}_steps": eng.num_steps, f"{name}_macro_steps": eng.num_macro_steps,
            f"{name}_max_prefill_tokens": eng.max_prefill_tokens,
            f"{name}_max_decode_seqs": eng.max_decode_seqs}
