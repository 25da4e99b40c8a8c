"""Validate the performance model against the reference server on this machine.

For each layout: start the server, calibrate (prefill and decode sweeps; the server's step
records give the engine curves), replay the workload, stop. The monolithic profile fixes the
load: its simulated capacity (the workload's requests all queued at once) times `load` is the
request rate the workload is replayed at. Then every layout is simulated with its own measured
profile and the predictions are compared with the replay's client-side measurements.

Each calibration and replay runs under a PhaseGuard (cpu_watch.py): it waits for other
processes to quiet down, repeats a disturbed phase once, and the foreign load of what was kept
is reported. Each layout's step times are stretched by the CPU its front and the client use at
the replay rate (contention.py), and, on the CPU device, by how much slower or faster each
worker's cores ran during the replay than during its calibration (speed_probe.py: a shared
VM's cores drift by up to 1.5x on their own). Predictions without that correction are kept
in the output (`unadjusted`).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from gpuprobe.errors import GpuprobeError, UserError
from gpuprobe.perf.calibrate import prefill_sizes_for
from gpuprobe.perf.replay_rate import schedule_frame
from gpuprobe.perf.metrics import TBT_TOLERANCE, Slo, best_note, pick_best, tied_best
from gpuprobe.perf.server_tbt import server_tbt
from gpuprobe.perf.sim_layouts import LayoutConfig
from gpuprobe.perf.verdict import (
    COMPARED,
    compare,
    measured_summaries,
    median_p50_error,
    median_summary,
    replay_range,
    tbt_tolerance,
)
from gpuprobe.perf.validate_drift import (
    drift_factors,
    dump_state,
    scaled_front,
    start_speed_probe,
)

DEFAULT_LOAD = 0.5    # the busiest stretch at half the monolithic capacity (replay_rate.py)
MAX_REPLAY_S = 30.0   # at the default load, a replay is sped up to end within this
CONTENTION_PASSES = 3  # simulate, stretch by the busy fractions, again: a fixed point


@dataclass(frozen=True)
class ValidateOptions:
    model: str = "tiny"
    layouts: tuple[str, ...] = ("monolithic", "intra", "cross")
    load: float | None = None  # of the simulated capacity (None: DEFAULT_LOAD); replay_rate.py
    load_basis: str = "peak"   # the busiest stretch's rate over capacity, or the mean's
    max_idle_s: float | None = 1.0  # peak basis: idle gaps of the replay cut to this
    rate_rps: float | None = None
    limit: int = 300
    token_scale: float = 0.1
    slo: Slo = Slo(ttft_s=0.5, tbt_s=0.05)
    prefill_share: float = 0.5
    device: str = "cpu"       # the server's --device (cpu | cuda)
    server_opts: tuple = ()   # extra start_server keyword pairs
    calibration: tuple = ()   # run_calibration keyword pairs (smaller sweeps for tests)
    replays: int = 3               # per layout; measured metrics are medians over them
    sim_seeds: int = 9             # simulator noise seeds per replay; predictions are medians
    time_budget_s: float = 540.0   # waits for a quiet machine and repeats stay within it
    quiet_wait_s: float = 30.0     # longest wait for other processes to quiet down, per phase
    speed_probe: bool = True       # CPU device: correct for the cores' own speed drift
    interleave: bool = False       # a calibration pass after every replay, all passes pooled


def prepare_workload(wl: pd.DataFrame, limit: int, token_scale: float, max_len: int) -> pd.DataFrame:
    """First `limit` requests, lengths scaled and clipped so prompt + output fits the model."""
    from gpuprobe.workloads.replay import scaled_lengths

    wl = wl.sort_values("arrival_s", kind="stable").iloc[:limit]
    if len(wl) < 2:
        raise UserError(f"workload has {len(wl)} request(s); validate needs at least 2")
    p, o = scaled_lengths(wl, token_scale)
    o = np.minimum(o, max_len // 4)
    p = np.minimum(p, max_len - o - 1)
    arr = wl["arrival_s"].to_numpy(float)
    return pd.DataFrame({"arrival_s": arr - arr[0], "prompt_tokens": p, "output_tokens": o})


def _say(msg: str, progress: bool) -> None:
    if progress:
        print(f"[validate {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_validate(workload: pd.DataFrame, opts: ValidateOptions, progress: bool = True) -> dict:
    """The whole validation; returns the JSON-ready result (see the CLI for its shape)."""
    from gpuprobe.model.config import resolve_model
    from gpuprobe.perf.cpu_watch import PhaseGuard
    from gpuprobe.perf.layout_probe import LayoutProbe

    cfg = resolve_model(opts.model)
    wl = prepare_workload(workload, opts.limit, opts.token_scale, cfg.max_seq_len)
    cal = dict(opts.calibration)  # prefills calibrated up to the longest prompt replayed
    cal.setdefault("prefill_sizes", prefill_sizes_for(int(wl["prompt_tokens"].max()),
                                                      cfg.max_seq_len - 1))
    opts = replace(opts, calibration=tuple(cal.items()))
    t_start = time.time()
    order = ["monolithic"] + [x for x in opts.layouts if x != "monolithic"]
    probes, capacity, rate = {}, None, None
    say = lambda m: _say(m, progress)
    per_layout = 1 + 2 * opts.replays if opts.interleave else 2 + opts.replays
    guard = PhaseGuard(time.monotonic() + opts.time_budget_s, per_layout * len(order),
                       max_wait_s=opts.quiet_wait_s, say=say)
    with _log_dir(os.environ.get("GPUPROBE_VALIDATE_LOGS")) as tmp, \
            start_speed_probe(opts, say) as speed_probe:
        for layout in order:
            say(f"{layout}: starting the server")
            with LayoutProbe(opts, layout, tmp, cfg.vocab_size, say) as probe:
                probe.calibrate(guard)
                if layout == "monolithic":
                    capacity = _capacity_rps(wl, probe, opts)
                    rate = _replay_rate(wl, capacity, opts)
                    sched = schedule_frame(wl, rate)
                    say(_rate_line(capacity, rate))
                if layout in opts.layouts and opts.interleave:
                    for i in range(opts.replays):
                        probe.replay(sched, guard, 1)
                        probe.recalibrate_if_time(guard, last=i == opts.replays - 1)
                elif layout in opts.layouts:
                    probe.replay(sched, guard, opts.replays)
                    probe.recheck(guard)
            probes[layout] = probe
        drift = drift_factors(speed_probe, probes, opts)
        dump_state(sched, probes, speed_probe, opts)
        at_server = {k: median_summary(server_tbt(probes[k].db, probes[k].replays))
                     for k in opts.layouts}
    say(f"simulating {len(opts.layouts)} layouts x {opts.replays} replays x {opts.sim_seeds} "
        "noise seeds")
    profile, predicted, confidence, stretch = predict_layouts(sched, probes, opts, drift)
    unadjusted = predict_layouts(sched, probes, opts)[1] if drift else predicted
    per_replay = measured_summaries(probes, opts.layouts, opts.slo)
    measured = {layout: median_summary(s) for layout, s in per_replay.items()}
    rows = compare(predicted, measured)
    out = _result(rows, predicted, measured, confidence, opts, capacity, rate, profile,
                  time.time() - t_start, len(wl), tbt_tolerance(per_replay))
    out["measured_range"] = replay_range(per_replay)
    out["server_tbt"] = at_server
    out["tbt_pool"] = {k: {m: s.get(m) for m in ("tbt_gaps", "tbt_first_share", "tbt_p99_first_share")}
                       for k, s in measured.items()}
    out["foreign_cores"] = {k: p.foreign_cores for k, p in probes.items()}
    out["front_stretch"] = stretch
    out["front_cpu"] = {k: vars(p.front_cpu) for k, p in probes.items() if p.front_cpu}
    out["speed_drift"] = drift
    out["recheck"] = {k: p.recheck_ratio for k, p in probes.items() if p.recheck_ratio}
    out["unadjusted"] = _unadjusted(unadjusted, measured, out["tbt_tolerance"])
    busy = {f"{k} {ph}": v for k, p in probes.items() for ph, v in p.foreign_cores.items()
            if v is not None and v >= guard.quiet}
    if busy:
        out.setdefault("notes", []).append(
            "other processes used CPU during " + ", ".join(f"{k} ({v:.2f} cores)" for k, v in
                                                            busy.items())
            + ": those measurements include their interference")
    return out


@contextlib.contextmanager
def _log_dir(keep: str | None):
    """The folder for the servers' logs and stores: `keep` if given, else a temporary one that
    is removed after a run that succeeds and kept after one that fails, so the log a failure
    message names is still there."""
    if keep:
        os.makedirs(keep, exist_ok=True)
        yield keep
        return
    tmp = tempfile.mkdtemp(prefix="gpuprobe-validate-")
    yield tmp
    shutil.rmtree(tmp, ignore_errors=True)


def predict_layouts(sim_wl: pd.DataFrame, probes: dict, opts: ValidateOptions,
                    drift: dict[str, list[dict[str, float]]] | None = None):
    """(profile, {layout: predicted summary}, {layout: confidence}, {layout: front stretch})
    for the workload as replayed (sim_wl: its replay schedule), from the calibrated probes.

    drift: {layout: per replay {worker: core slowness vs calibration}}; each replay is then
    predicted with its workers' step times (and the front's CPU) scaled by it, and the
    prediction is the median over replays, as the measurement is."""
    from gpuprobe.perf.contention import stretched
    from gpuprobe.perf.costmodel import Overhead
    from gpuprobe.perf.layout_probe import scheduler_configs
    from gpuprobe.perf.profile import assemble

    ovh = probes["monolithic"].overhead_s
    profile = assemble([p.part for p in probes.values()],
                       Overhead(request_in_s=max(0.0, ovh), source="measured"),
                       max(p.kv_bytes_per_token for p in probes.values()),
                       f"validate-{opts.model}", {"source": "validate", "model": opts.model},
                       opts.prefill_share)
    configs = scheduler_configs(probes)
    predicted, confidence, stretch = {}, {}, {}
    for layout in opts.layouts:
        prof = profile
        if layout != "monolithic":  # the split layouts' extra front-end path, measured per layout
            prof = _with_split(profile, probes[layout].overhead_s - ovh)
        front = probes[layout].front_cpu
        # One prediction per replay (at its cores' speed, when the probe read it), the median
        # over sim_seeds seeds of the profile's step-time noise; then the median over replays,
        # like the measurement's. Every window draws the same noise for a seed, so a few seeds'
        # luck is every window's: seeds 0-2 alone ran monolithic's TTFT p50 3.5% below the
        # model's own expectation on all 31 windows alike (docs/model-log.md, "Seeds").
        factors = (drift or {}).get(layout) or [{}] * opts.replays
        per_replay = []
        for i, f in enumerate(factors):
            sims = [_contended(sim_wl, stretched(prof, f), layout, scaled_front(front, f), opts,
                               configs, i + len(factors) * j) for j in range(opts.sim_seeds)]
            per_replay.append(median_summary([res.summary for _, res in sims]))
            if i == 0:
                stretch[layout] = sims[0][0]
                confidence[layout] = sims[0][1].summary["confidence"]
        predicted[layout] = median_summary(per_replay)
    return profile, predicted, confidence, stretch


def _contended(sim_wl: pd.DataFrame, profile, layout: str, front, opts: ValidateOptions,
               configs, seed: int = 0):
    """({worker: step-time factor}, SimResult) with the front's CPU taken from the workers'
    cores: for monolithic, its per-request part a stall at each arrival
    (contention.arrival_stalled); the rest a stretch (contention.busy_stretch), whose factors
    depend on how busy the workers are, which depends on the factors: a few passes from no
    stretch."""
    from gpuprobe.perf.contention import arrival_stalled, busy_stretch, stretched
    from gpuprobe.perf.simulator import simulate

    roles = ("mixed",) if layout == "monolithic" else ("prefill", "decode")
    if layout == "monolithic" and front is not None:
        profile, front = arrival_stalled(profile, front)
    keys = {r: "monolithic" if r == "mixed" else f"{layout}.{r}" for r in roles}
    factor = dict.fromkeys(keys.values(), 1.0)
    res = simulate(sim_wl, profile, layout, opts.slo, configs, seed)
    if front is None:
        return factor, res
    tokens = float(sim_wl["output_tokens"].mean())
    prompts = float(sim_wl["prompt_tokens"].mean())
    for _ in range(CONTENTION_PASSES):
        span = res.summary.get("span_s") or 0.0
        name = {"mixed": "monolithic"}
        busy = {keys[r]: res.summary.get(f"{name.get(r, r)}_busy_s", 0.0) / span if span > 0
                else 1.0 for r in roles}
        factor = busy_stretch(front, _rate(sim_wl), tokens, busy, pinned=layout != "monolithic",
                              prompt_tokens_per_request=prompts)
        res = simulate(sim_wl, stretched(profile, factor), layout, opts.slo, configs, seed)
    return factor, res


def _unadjusted(predicted: dict[str, dict], measured: dict[str, dict],
                tolerance: float = TBT_TOLERANCE) -> dict:
    """Predictions without the speed-drift correction, with their errors, per layout."""
    rows = compare(predicted, measured)
    out = {}
    for layout in predicted:
        out[layout] = {"predicted": {m: predicted[layout].get(m) for m in COMPARED},
                       "median_abs_rel_error_p50": median_p50_error(rows, layout)}
    out["best_predicted"] = pick_best(predicted, tolerance)
    return out


def _with_split(profile, split_in_s: float):
    return replace(profile, overhead=replace(profile.overhead, split_in_s=split_in_s))


def _replay_rate(wl: pd.DataFrame, capacity: float, opts: ValidateOptions):
    """The replay schedule: --rate, else --load (DEFAULT_LOAD at the busiest stretch, sped up
    to end within MAX_REPLAY_S, when no load was given)."""
    from gpuprobe.perf.replay_rate import replay_rate

    auto = opts.load is None and opts.rate_rps is None
    return replay_rate(wl["arrival_s"].to_numpy(float), capacity,
                       DEFAULT_LOAD if opts.load is None else opts.load, opts.load_basis,
                       opts.rate_rps, opts.max_idle_s, MAX_REPLAY_S if auto else None)


def _rate_line(capacity: float, rate) -> str:
    cut = (f", gaps over {rate.gap_cap_s:.2g} s cut to it ({rate.idle_cut_s:.0f} s in all)"
           if rate.idle_cut_s > 0.05 and rate.gap_cap_s is not None else "")
    return (f"monolithic capacity {capacity:.1f} req/s (simulated from its profile); replaying at "
            f"{rate.mean_rps:.1f} req/s mean ({rate.mean_load:.2f} of capacity), its busiest "
            f"{rate.peak_window} requests at {rate.peak_rps:.1f} req/s ({rate.peak_load:.2f}) "
            f"over {rate.arrival_s[-1]:.1f} s{cut}")


def _capacity_rps(wl: pd.DataFrame, probe, opts: ValidateOptions) -> float:
    """Requests per second the monolithic layout finishes with every request queued at t=0."""
    from gpuprobe.perf.costmodel import Overhead, Profile
    from gpuprobe.perf.simulator import simulate

    prof = Profile(workers=probe.part["workers"], overhead=Overhead(probe.overhead_s, 0, 0, "measured"))
    res = simulate(wl.assign(arrival_s=0.0), prof, "monolithic", opts.slo,
                   LayoutConfig(mixed=probe.scheduler_config("mixed")))
    span = res.summary.get("span_s") or float("nan")
    if not np.isfinite(span) or span <= 0:
        raise GpuprobeError("could not estimate the monolithic capacity from its profile")
    engine_rps = cap = len(wl) / span
    if probe.front_cpu is None:
        return cap
    from gpuprobe.perf.contention import busy_stretch

    tokens, prompts = float(wl["output_tokens"].mean()), float(wl["prompt_tokens"].mean())
    for _ in range(30):  # the rate at which the engine, always busy, slowed by the front, keeps up
        f = busy_stretch(probe.front_cpu, cap, tokens, {"monolithic": 1.0}, pinned=False,
                         prompt_tokens_per_request=prompts)
        cap = engine_rps / f["monolithic"]
    return cap


def _rate(wl: pd.DataFrame) -> float:
    """The workload's own request rate, req/s."""
    return (len(wl) - 1) / (float(wl["arrival_s"].iloc[-1]) or 1.0)


def _result(rows, predicted, measured, confidence, opts, capacity, rate, profile, wall_s, n,
            tolerance: float = TBT_TOLERANCE) -> dict:
    summary = {}
    for layout in predicted:
        summary[layout] = {"median_abs_rel_error_p50": median_p50_error(rows, layout),
                           "slo_attainment_predicted": predicted[layout]["slo_attainment"],
                           "slo_attainment_measured": measured[layout]["slo_attainment"]}
    best_m, best_p = pick_best(measured, tolerance), pick_best(predicted, tolerance)
    out = {"rows": rows, "best_measured": best_m, "best_predicted": best_p,
           "tied_measured": tied_best(measured, tolerance),
           "tied_predicted": tied_best(predicted, tolerance), "tbt_tolerance": tolerance,
           "slo": opts.slo.to_dict(), "summary": summary, "confidence": confidence,
           "workload": {"num_requests": n, "token_scale": opts.token_scale,
                        "rate_rps": opts.rate_rps, "capacity_rps": capacity, **rate.info()},
           "wall_s": wall_s, "profile": profile.to_dict()}
    for name, summ in (("best_measured", measured), ("best_predicted", predicted)):
        if note := best_note(summ, out[name]):
            out.setdefault("notes", []).append(f"{name}: {note}")
    return out
