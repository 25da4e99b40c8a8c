"""Wire simulated workers into a layout: monolithic, intra (split on one device), cross.

monolithic: one 'mixed' worker. intra / cross: a 'prefill' worker whose finished prefills
reach a 'decode' worker after the KV handoff (latency + bytes / bandwidth of the layout's
link, times a seeded draw from its spread). Tokens leave, and handoffs start, at the end of
a step's forward pass, before the loop's overhead that the step time holds. The prefill
worker never waits on the decode worker (it exports and frees the KV), so the prefill
worker is simulated first and its output times become the decode worker's inputs.
cross as xPyD (LayoutConfig.num_prefill, num_decode): requests go round-robin in arrival
order to the x prefill workers, and handed-off requests round-robin in handoff order to the y
decode workers (a router that knows no load, as the simple disaggregation proxies do); with
one of each it is the 1P1D layout, bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuprobe.engine.scheduler import SchedulerConfig
from gpuprobe.engine.sequence import SamplingParams
from gpuprobe.perf.costmodel import Profile
from gpuprobe.sim.engine import SimEngine, np_view
from gpuprobe.sim.scheduler import SimSequence

LAYOUTS = ("monolithic", "intra", "cross")
DEVICES = {"monolithic": 1, "intra": 1, "cross": 2}  # one unit on one-device workers (validate)


@dataclass(frozen=True)
class LayoutConfig:
    """Scheduler settings per role (the server's defaults unless the caller passes its own)."""

    mixed: SchedulerConfig = field(default_factory=lambda: SchedulerConfig(role="mixed"))
    prefill: SchedulerConfig = field(default_factory=lambda: SchedulerConfig(role="prefill"))
    decode: SchedulerConfig = field(default_factory=lambda: SchedulerConfig(role="decode"))
    num_prefill: int = 1  # cross only: x prefill workers (one device each)
    num_decode: int = 1   # cross only: y decode workers


def num_devices(layout: str, config: LayoutConfig | None = None,
                profile: Profile | None = None) -> int:
    """Devices one unit of `layout` takes: cross xPyD takes x + y workers, the others one;
    each worker the tp devices its StepCost spans (profile's; one without a profile)."""
    if profile is None:
        tp = {"mixed": 1, "prefill": 1, "decode": 1}
    else:
        tp = {r: profile.worker(layout, r).tp for r in ("mixed", "prefill", "decode")}
    if layout == "monolithic":
        return tp["mixed"]
    if layout == "intra":
        return tp["prefill"]  # both engines share the device (group)
    x, y = (config.num_prefill, config.num_decode) if config is not None else (1, 1)
    return x * tp["prefill"] + y * tp["decode"]


@dataclass
class RawTimes:
    """Per-request engine results, times in seconds on the workload's clock, as the client
    sees them (token_out_s included).

    first_s: first token per request (NaN if rejected). times_s: the decode worker's step
    ends, then its uniform decode steps' ends again (the axis the runs index; once only when
    every step was a uniform one, as on a split layout's decode worker). run_owner /
    run_start / run_count (int arrays): runs of each request's later tokens, grouped by
    request, in time order within one (see timeline.token_stats).
    """

    first_s: np.ndarray
    times_s: np.ndarray
    run_owner: np.ndarray
    run_start: np.ndarray
    run_count: np.ndarray
    stats: dict


def _sequences(prompt_tokens: np.ndarray, output_tokens: np.ndarray,
               cached_tokens: np.ndarray | None = None) -> list[SimSequence]:
    # ignore_eos: the trace says how many tokens each request produced. range(p) is a prompt
    # nobody reads the ids of (Sequence keeps it as is); one SamplingParams per length.
    # SimSequences: they can join the SimScheduler's lazy decode runs.
    # Built with map(): no Python-level loop per request.
    prompts = np.maximum(np.asarray(prompt_tokens).astype(np.int64), 1).tolist()
    outputs = np.maximum(np.asarray(output_tokens).astype(np.int64), 1).tolist()
    params = {o: SamplingParams(max_tokens=o, ignore_eos=True) for o in set(outputs)}
    seqs = list(map(SimSequence, map(str, range(len(prompts))), map(range, prompts),
                    map(params.__getitem__, outputs)))
    if cached_tokens is not None:
        # A prefix cache's hit: the prompt's KV up to there is there before the first step,
        # as vLLM's scheduler counts it computed; the scheduler prefills the rest (its blocks
        # are still allocated for the whole prompt, and a preempted request recomputes all).
        cached = np.clip(np.asarray(cached_tokens, dtype=np.int64), 0, np.asarray(prompts) - 1)
        for seq, c in zip(seqs, cached.tolist()):
            seq.num_computed_tokens = c
    return seqs


def run_layout(layout: str, arrival_s: np.ndarray, prompt_tokens: np.ndarray,
               output_tokens: np.ndarray, profile: Profile, config: LayoutConfig,
               seed: int | None = 0, cached_tokens: np.ndarray | None = None) -> RawTimes:
    """Simulate one layout; arrays are per request, arrival_s sorted ascending. seed: of the
    step-time noise of workers whose profile has some and of the handoffs of a link with a
    spread (None: every step on its curve, every handoff on its line). cached_tokens: each
    prompt's tokens a prefix cache already holds (None: none)."""
    def rng(i: int):
        return None if seed is None else np.random.default_rng([seed, i])
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    ovh = profile.overhead
    seqs = _sequences(prompt_tokens, output_tokens, cached_tokens)
    in_s = ovh.request_in_s + (ovh.split_in_s if layout != "monolithic" else 0.0)
    ready_s = (arrival_s + in_s).tolist()
    if layout == "monolithic":
        pre_cost = dec_cost = profile.worker(layout, "mixed")
        eng = SimEngine(config.mixed, pre_cost, rng(0))
        eng.run(ready_s, seqs, arrival_s.tolist())
        first_eng, dec = eng, eng
        stats = _stats(eng, "monolithic")
    else:
        x, y = (config.num_prefill, config.num_decode) if layout == "cross" else (1, 1)
        pre_cost = profile.worker(layout, "prefill")
        pres = [SimEngine(config.prefill, pre_cost, rng(0) if j == 0 else _rng_j(seed, 0, j))
                for j in range(x)]
        arrivals = arrival_s.tolist()
        for j, pre in enumerate(pres):
            pre.run(ready_s[j::x], seqs[j::x], arrivals[j::x])
        prefilled = [q for pre in pres for q in pre.prefilled]
        prefilled_s = np.concatenate([np_view(pre.prefilled_s) for pre in pres])
        link, kvb = profile.link(layout), profile.kv_bytes_per_token
        tokens = np.fromiter((s.num_computed_tokens for s in prefilled), np.int64, len(prefilled))
        # Link.seconds(), vectorized: the same operations as on Python numbers; each handoff
        # times a seeded draw from the link's spread, where it has one.
        moved_s = link.latency_s + kvb * tokens / link.bytes_per_s
        if link.spread and seed is not None:
            draws = rng(2).integers(0, len(link.spread), len(tokens))
            moved_s = moved_s * np.asarray(link.spread)[draws]
        handed_s = prefilled_s - _emit_lag(pre_cost) + moved_s
        order = np.argsort(handed_s, kind="stable").tolist()  # ties keep prefill order
        dec_cost = profile.worker(layout, "decode")
        events = None
        if dec_cost.decode_event_noise and seed is not None:  # the front's bursts (front_events)
            events = np.sort(np.r_[arrival_s, prefilled_s - _emit_lag(pre_cost)])
        decs = [SimEngine(config.decode, dec_cost, rng(1) if k == 0 else _rng_j(seed, 1, k))
                for k in range(y)]
        for k, dec in enumerate(decs):
            mine = order[k::y]
            dec.run(handed_s[mine].tolist(), [prefilled[i] for i in mine], events_s=events)
        first_eng, dec = _Merged(pres), _Merged(decs)
        stats = {**_merged_stats(pres, "prefill"), **_merged_stats(decs, "decode")}
    n = len(seqs)
    first = np.full(n, np.nan)
    if first_eng.first_s:
        first[_ints(first_eng.first_s)] = np.fromiter(first_eng.first_s.values(), float)
    first += ovh.token_out_s - _emit_lag(pre_cost)
    rejected = _ints({s.seq_id for e in {first_eng, dec} for s in e.rejected})
    first[rejected] = np.nan
    times, offset = dec.time_axis()
    times += ovh.token_out_s - _emit_lag(dec_cost)
    owner = _ints(dec.run_ids)
    starts = np.asarray(dec.run_starts, dtype=np.int64)
    starts = np.where(starts >= 0, starts, offset - 1 - starts)  # uniform ordinal -> axis
    keep = np.flatnonzero(~np.isin(owner, rejected))
    keep = keep[np.argsort(owner[keep], kind="stable")]  # by request, time order kept
    stats["num_rejected"] = len(rejected)
    return RawTimes(first, times, owner[keep], starts[keep],
                    np.asarray(dec.run_counts, dtype=np.int64)[keep], stats)


def _rng_j(seed: int | None, i: int, j: int):
    """The generator of the j-th (j >= 1) worker of a role: its own stream, so worker 0 keeps
    the 1P1D draws."""
    return None if seed is None else np.random.default_rng([seed, i, j])


class _Merged:
    """Several workers of one role read as one: first tokens, rejections and the decode
    workers' time axes laid end to end, each worker's run starts moved onto its segment (a
    run never crosses a segment, so the gaps come out as each worker's own)."""

    def __init__(self, engines: list[SimEngine]):
        self.engines = engines
        self.first_s = {k: v for e in engines for k, v in e.first_s.items()}
        self.rejected = [q for e in engines for q in e.rejected]
        if len(engines) == 1:
            one = engines[0]
            self.run_ids, self.run_starts, self.run_counts = one.run_ids, one.run_starts, one.run_counts
            self.time_axis = one.time_axis
            return
        axes, ids, starts, counts, base = [], [], [], [], 0
        for e in engines:
            times, offset = e.time_axis()
            st = np.asarray(e.run_starts, dtype=np.int64)
            starts.append(np.where(st >= 0, st, offset - 1 - st) + base)
            axes.append(times)
            ids += e.run_ids
            counts += e.run_counts
            base += len(times)
        self.run_ids, self.run_counts = ids, counts
        self.run_starts = np.concatenate(starts) if starts else np.zeros(0, np.int64)
        axis = np.concatenate(axes) if axes else np.zeros(0)
        self.time_axis = lambda: (axis.copy(), 0)  # starts are already on the axis: none < 0


def _merged_stats(engines: list[SimEngine], name: str) -> dict:
    """_stats over a role's workers: counts and busy time summed, maxima the largest."""
    parts = [_stats(e, name) for e in engines]
    if len(parts) == 1:
        return parts[0]
    out = {k: sum(p[k] for p in parts) for k in parts[0]}
    for k in (f"{name}_max_prefill_tokens", f"{name}_max_decode_seqs"):
        out[k] = max(p[k] for p in parts)
    return out


def _emit_lag(cost) -> float:
    """How long before its step's end (the next step's start) a worker's tokens leave: the
    loop's overhead between steps (StepCost.step_overhead_s, times scale) comes after the
    worker sends them, as its handoffs start after it too. Measured on the reference
    server: 0.8 ms (monolithic) and 1.5-2.3 ms (a split prefill worker) that every
    simulated TTFT had held on top of the calibration's own."""
    return cost.step_overhead_s * cost.scale


def _ints(seq_ids) -> np.ndarray:
    """Request indices from the simulator's seq_ids (str(index))."""
    return np.fromiter(map(int, seq_ids), np.int64, len(seq_ids))


def _stats(eng: SimEngine, name: str) -> dict:
    return {f"{name}_steps": eng.num_steps, f"{name}_macro_steps": eng.num_macro_steps,
            f"{name}_max_prefill_tokens": eng.max_prefill_tokens,
            f"{name}_max_decode_seqs": eng.max_decode_seqs, f"{name}_busy_s": eng.busy_s}
