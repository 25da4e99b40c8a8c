"""Validate the performance model against the reference server on this machine.

For each layout: start the server, calibrate (prefill and decode sweeps; the server's step
records give the engine curves), replay the workload, stop. The monolithic profile fixes the
load: its simulated capacity (the workload's requests all queued at once) times `load` is the
request rate the workload is replayed at. Then every layout is simulated with its own measured
profile and the predictions are compared with the replay's client-side measurements.

The run keeps a plan within its budget (plan.py). Each calibration and replay runs under a
PhaseGuard (cpu_watch.py): it waits for other processes to quiet down, repeats a disturbed
phase once, and the foreign load of what was kept is reported. The predictions go through
the one prediction path (perf/predict.py) with the host effects this run measured: the CPU
the front and the client take from the workers (contention.py) and, on the CPU device, each
replay's core speed against its calibration's (speed_probe.py). The predictions without
host effects, which `gpuprobe simulate` gives on this run's profile (`--profile-out`), are
kept in the output (`without_host_effects`) with their errors.
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
from gpuprobe.perf.calibrate import decode_prompts_for, prefill_sizes_for
from gpuprobe.validate.replay_rate import schedule_frame
from gpuprobe.perf.metrics import TBT_TOLERANCE, Slo, best_note, pick_best, tied_best
from gpuprobe.perf.predict import median_summary
from gpuprobe.validate.server_tbt import server_tbt
from gpuprobe.perf.sim_layouts import LayoutConfig
from gpuprobe.validate.verdict import (
    BAR,
    COMPARED,
    compare,
    measured_summaries,
    median_p50_error,
    replay_range,
    tbt_tolerance,
)
from gpuprobe.validate.drift import (
    drift_factors,
    dump_state,
    start_speed_probe,
)

DEFAULT_LOAD = 0.5    # the busiest stretch at half the monolithic capacity (replay_rate.py)


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
    budget_s: float = 600.0        # the whole run, every phase (plan.py)
    quiet_wait_s: float = 30.0     # longest wait for other processes to quiet down, per phase
    speed_probe: bool = True       # CPU device: correct for the cores' own speed drift
    host_effects: bool = True      # predict with the host effects measured (predict.py)
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
    from gpuprobe.validate.cpu_watch import PhaseGuard
    from gpuprobe.validate.layout_probe import LayoutProbe

    cfg = resolve_model(opts.model)
    wl = prepare_workload(workload, opts.limit, opts.token_scale, cfg.max_seq_len)
    cal = dict(opts.calibration)  # prefills calibrated up to the longest prompt replayed
    cal.setdefault("prefill_sizes", prefill_sizes_for(int(wl["prompt_tokens"].max()),
                                                      cfg.max_seq_len - 1))
    cal.setdefault("decode_prompts", decode_prompts_for(
        wl["prompt_tokens"] + wl["output_tokens"] / 2, cfg.max_seq_len))
    opts = replace(opts, calibration=tuple(cal.items()))
    t_start, t0 = time.time(), time.monotonic()
    order = ["monolithic"] + [x for x in opts.layouts if x != "monolithic"]
    probes, capacity, plan = {}, None, None
    say = lambda m: _say(m, progress)
    # Before the plan the guard counts every phase of the full protocol, so monolithic's
    # first pass is not repeated on a busy machine before the plan knows what the budget
    # holds; make_plan sets the phases that will run.
    per_layout = 1 + 2 * opts.replays if opts.interleave else 2 + opts.replays
    guard = PhaseGuard(t0 + opts.budget_s, per_layout * len(order), max_wait_s=opts.quiet_wait_s,
                       say=say, hard_deadline=t0 + opts.budget_s)
    with _log_dir(os.environ.get("GPUPROBE_VALIDATE_LOGS")) as tmp, \
            start_speed_probe(opts, say) as speed_probe, \
            BudgetWatch(t0 + opts.budget_s, opts.budget_s, say) as watch:
        for layout in order:
            say(f"{layout}: starting the server")
            t_up = time.monotonic()
            with watch.running(LayoutProbe(opts, layout, tmp, cfg.vocab_size, say)) as probe:
                start_s = time.monotonic() - t_up
                probe.calibrate(guard)
                if layout == "monolithic":
                    capacity = _capacity_rps(wl, probe, opts)
                    plan = _plan(wl, capacity, probe, opts, start_s, time.monotonic() - t0)
                    for line in plan.lines():
                        say(line)
                    opts = replace(opts, replays=plan.replays, sim_seeds=plan.sim_seeds,
                                   interleave=plan.interleave)
                    sched = schedule_frame(wl, plan.rate)
                    say(_rate_line(capacity, plan.rate))
                    left = _phases(plan)
                    guard.replan(t0 + opts.budget_s - plan.sim_s, left,
                                 (plan.total_s - plan.spent_s - plan.sim_s) / max(1, left))
                if layout in opts.layouts and opts.interleave:
                    for i in range(opts.replays):
                        probe.replay(sched, guard, 1)
                        if plan.pass_after(i):
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
    unadjusted = (predict_layouts(sched, probes, replace(opts, host_effects=False))[1]
                  if opts.host_effects else predicted)
    per_replay = measured_summaries(probes, opts.layouts, opts.slo)
    measured = {layout: median_summary(s) for layout, s in per_replay.items()}
    rows = compare(predicted, measured)
    out = _result(rows, predicted, measured, confidence, opts, capacity, plan.rate, profile,
                  time.time() - t_start, len(sched), tbt_tolerance(per_replay))
    out["plan"] = plan.to_dict()
    out["budget_s"] = opts.budget_s
    out["measured_range"] = replay_range(per_replay)
    out["server_tbt"] = at_server
    out["tbt_pool"] = {k: {m: s.get(m) for m in ("tbt_gaps", "tbt_first_share", "tbt_p99_first_share")}
                       for k, s in measured.items()}
    out["foreign_cores"] = {k: p.foreign_cores for k, p in probes.items()}
    out["front_stretch"] = stretch
    out["front_cpu"] = {k: vars(p.front_cpu) for k, p in probes.items() if p.front_cpu}
    out["speed_drift"] = drift
    effects = host_effects_of(probes, opts, drift)
    out["host_effects"] = {"applied": {k: v.get("host_effects", []) for k, v in predicted.items()},
                           "measured": effects.to_dict() if effects else None}
    out["recheck"] = {k: p.recheck_ratio for k, p in probes.items() if p.recheck_ratio}
    out["without_host_effects"] = _unadjusted(unadjusted, measured, out["tbt_tolerance"])
    busy = {f"{k} {ph}": v for k, p in probes.items() for ph, v in p.foreign_cores.items()
            if v is not None and v >= guard.quiet}
    if busy:
        out.setdefault("notes", []).append(
            "other processes used CPU during " + ", ".join(f"{k} ({v:.2f} cores)" for k, v in
                                                            busy.items())
            + ": those measurements include their interference")
    return out


class BudgetWatch:
    """No phase runs past the budget: at the deadline, the server of the phase in progress is
    stopped, its requests fail, and the run stops with one line saying so (a calibration
    pass on a machine loaded ten times over can take longer than the whole budget)."""

    def __init__(self, deadline: float, budget_s: float, say=lambda m: None):
        import threading

        self.budget_s, self.say, self.expired, self.probe = budget_s, say, False, None
        self.timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._expire)
        self.timer.daemon = True

    def _expire(self) -> None:
        self.expired = True
        probe = self.probe
        if probe is not None and probe.handle is not None:
            self.say(f"{probe.layout}: the {self.budget_s:.0f} s budget is spent; stopping")
            probe.handle.stop(timeout_s=5.0)

    @contextlib.contextmanager
    def running(self, probe):
        """`probe` entered, the one to stop when the budget runs out."""
        with probe:
            self.probe = probe
            try:
                yield probe
            finally:
                self.probe = None

    def __enter__(self) -> "BudgetWatch":
        self.timer.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.timer.cancel()
        if self.expired and exc_type is not None and issubclass(exc_type, Exception):
            raise GpuprobeError(
                f"stopped: the --budget of {self.budget_s:.0f} s ran out before the "
                f"measurements ended (the phases took longer than planned, or the first "
                f"calibration pass alone took the budget: see the foreign-load lines above); "
                f"raise --budget, pass fewer --layouts or a smaller --limit, or run on a "
                f"quieter machine") from exc


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


def validate_profile(probes: dict, opts: ValidateOptions):
    """The profile validate assembles from its layouts' calibrations: every worker's step
    costs, the links, the front's overhead, and each split layout's extra front path
    (meta['split_in_s'], predict.layout_profile); meta says what it was measured on."""
    from gpuprobe.perf.costmodel import Overhead
    from gpuprobe.validate.layout_probe import scheduler_configs
    from gpuprobe.perf.profile import assemble

    ovh = probes["monolithic"].overhead_s
    configs = scheduler_configs(probes)
    meta = {"source": "validate", "model": opts.model, "target": opts.device,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "layouts": list(probes), "prefill_share": opts.prefill_share,
            "split_in_s": {k: p.overhead_s - ovh for k, p in probes.items() if k != "monolithic"},
            "scheduler": {r: vars(c) for r, c in zip(("mixed", "prefill", "decode"),
                                                      (configs.mixed, configs.prefill,
                                                       configs.decode))}}
    return assemble([p.part for p in probes.values()],
                    Overhead(request_in_s=max(0.0, ovh), source="measured"),
                    max(p.kv_bytes_per_token for p in probes.values()),
                    f"validate-{opts.model}", meta, opts.prefill_share)


def host_effects_of(probes: dict, opts: ValidateOptions, drift: dict | None = None):
    """predict.HostEffects measured by this run: the front's CPU per layout and, with the
    speed probe's readings, each replay's core speed (None with opts.host_effects off)."""
    from gpuprobe.perf.predict import HostEffects

    if not opts.host_effects:
        return None
    return HostEffects(front_cpu={k: p.front_cpu for k, p in probes.items()
                                  if k in opts.layouts and p.front_cpu is not None},
                       speed_drift={k: v for k, v in (drift or {}).items() if v})


def predict_layouts(sim_wl: pd.DataFrame, probes: dict, opts: ValidateOptions,
                    drift: dict[str, list[dict[str, float]]] | None = None):
    """(profile, {layout: predicted summary}, {layout: confidence}, {layout: front stretch})
    for the workload as replayed (sim_wl: its replay schedule), from the calibrated probes,
    through predict.predict with this run's host effects (drift: {layout: per replay
    {worker: core slowness vs calibration}})."""
    from gpuprobe.validate.layout_probe import scheduler_configs
    from gpuprobe.perf.predict import predict

    profile = validate_profile(probes, opts)
    configs = scheduler_configs(probes)
    effects = host_effects_of(probes, opts, drift)
    predicted = {x: predict(sim_wl, profile, x, opts.slo, configs, opts.sim_seeds,
                            host_effects=effects) for x in opts.layouts}
    return (profile, predicted, {x: s["confidence"] for x, s in predicted.items()},
            {x: s["front_stretch"] for x, s in predicted.items()})


def _unadjusted(predicted: dict[str, dict], measured: dict[str, dict],
                tolerance: float = TBT_TOLERANCE) -> dict:
    """Predictions without host effects, with their errors, per layout."""
    rows = compare(predicted, measured)
    out = {}
    for layout in predicted:
        out[layout] = {"predicted": {m: predicted[layout].get(m) for m in COMPARED},
                       "median_abs_rel_error_p50": median_p50_error(rows, layout)}
    out["best_predicted"] = pick_best(predicted, tolerance)
    return out


def _plan(wl: pd.DataFrame, capacity: float, probe, opts: ValidateOptions, start_s: float,
          spent_s: float):
    """plan.make_plan with this run's measurements: monolithic's start and pass,
    the replay's drain from monolithic's simulation, the predictions' time from one run."""
    from gpuprobe.perf.costmodel import Overhead, Profile
    from gpuprobe.validate.replay_rate import replay_rate
    from gpuprobe.perf.simulator import simulate
    from gpuprobe.perf.predict import CONTENTION_PASSES
    from gpuprobe.validate.plan import DRAIN_MARGIN, REPLAY_OVERHEAD_S, make_plan, timed

    load = DEFAULT_LOAD if opts.load is None else opts.load
    t = wl["arrival_s"].to_numpy(float)
    prof = Profile(workers=probe.part["workers"],
                   overhead=Overhead(probe.overhead_s, 0, 0, "measured"))
    config = LayoutConfig(mixed=probe.scheduler_config("mixed"))
    sim_s = []

    def schedule_for(span_s: float):
        return replay_rate(t, capacity, load, opts.load_basis, opts.rate_rps, opts.max_idle_s,
                           span_s)

    def replay_s_for(rate) -> float:
        res, took = timed(lambda: simulate(schedule_frame(wl, rate), prof, "monolithic",
                                           opts.slo, config))
        sim_s.append(took)
        return DRAIN_MARGIN * float(res.summary.get("span_s") or rate.arrival_s[-1]) \
            + REPLAY_OVERHEAD_S

    first = schedule_for(1e9)  # the simulation's own time, on the whole workload
    replay_s_for(first)
    # per seed: each layout, each replay, the contention passes, and the unadjusted twin;
    # a split layout simulates two workers (about twice monolithic's time)
    weight = sum(1 if x == "monolithic" else 2 for x in opts.layouts)
    per_seed = sim_s[0] * weight * opts.replays \
        * (1 + CONTENTION_PASSES) * 2
    layout_pass = probe.cal_runs[0]["window"]
    return make_plan(schedule_for, replay_s_for, per_seed, opts, opts.layouts, start_s,
                     layout_pass[1] - layout_pass[0], spent_s, opts.budget_s)


def _phases(plan) -> int:
    """Guarded phases left after monolithic's first pass, as planned."""
    per = plan.replays + (plan.passes - 1 if plan.interleave else 1)
    return sum(per + (0 if x == "monolithic" else 1) for x in plan.layouts)


def _rate_line(capacity: float, rate) -> str:
    cut = (f", gaps over {rate.gap_cap_s:.2g} s cut to it ({rate.idle_cut_s:.0f} s in all)"
           if rate.idle_cut_s > 0.05 and rate.gap_cap_s is not None else "")
    return (f"monolithic capacity {capacity:.2f} req/s (simulated from its profile); replaying at "
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


def _result(rows, predicted, measured, confidence, opts, capacity, rate, profile, wall_s, n,
            tolerance: float = TBT_TOLERANCE) -> dict:
    summary = {}
    for layout in predicted:
        summary[layout] = {"median_abs_rel_error_p50": median_p50_error(rows, layout),
                           "slo_attainment_predicted": predicted[layout]["slo_attainment"],
                           "slo_attainment_measured": measured[layout]["slo_attainment"]}
    best_m, best_p = pick_best(measured, tolerance), pick_best(predicted, tolerance)
    errors = [s["median_abs_rel_error_p50"] for s in summary.values()]
    out = {"rows": rows, "best_measured": best_m, "best_predicted": best_p,
           "tied_measured": tied_best(measured, tolerance),
           "tied_predicted": tied_best(predicted, tolerance), "tbt_tolerance": tolerance,
           "bar": BAR, "bar_met": best_m == best_p and all(e is not None and e <= BAR
                                                            for e in errors),
           "slo": opts.slo.to_dict(), "summary": summary, "confidence": confidence,
           "workload": {"num_requests": n, "token_scale": opts.token_scale,
                        "rate_rps": opts.rate_rps, "capacity_rps": capacity, **rate.info()},
           "wall_s": wall_s, "profile": profile.to_dict()}
    for name, summ in (("best_measured", measured), ("best_predicted", predicted)):
        if note := best_note(summ, out[name]):
            out.setdefault("notes", []).append(f"{name}: {note}")
    return out
