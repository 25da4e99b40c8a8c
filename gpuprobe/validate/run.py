"""Validate the performance model against the reference server on this machine.

For each layout: start the server, calibrate (prefill and decode sweeps; the server's step
records give the engine curves), replay the workload, stop. The monolithic profile fixes the
load: its simulated capacity (the workload's requests all queued at once) times `load` is the
request rate the workload is replayed at. Then every layout is simulated with its own measured
profile and the predictions are compared with the replay's client-side measurements.

The run keeps a plan within its budget (plan.py, sized by sizing.py; BudgetWatch stops it at
the budget). Each calibration and replay runs under a
PhaseGuard (cpu_watch.py): it waits for other processes to quiet down, repeats a disturbed
phase once, and the foreign load of what was kept is reported. The predictions go through
the one prediction path (sim/predict.py) with the host effects this run measured: the CPU
the front and the client take from the workers (contention.py) and, on the CPU device, each
replay's core speed against its calibration's (speed_probe.py). The predictions without
host effects, which `gpuprobe simulate` gives on this run's profile (`--profile-out`), are
kept in the output (`without_host_effects`) with their errors (predictions.py, result.py).
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

from gpuprobe.errors import UserError
from gpuprobe.workloads.calibrate import decode_prompts_for, prefill_sizes_for
from gpuprobe.sim.predict import median_summary
from gpuprobe.validate.budget_watch import BudgetWatch
from gpuprobe.validate.drift import drift_factors, dump_state, start_speed_probe
from gpuprobe.validate.options import ValidateOptions
from gpuprobe.validate.predictions import host_effects_of, predict_layouts
from gpuprobe.validate.replay_rate import schedule_frame
from gpuprobe.validate.result import result_json, unadjusted
from gpuprobe.validate.server_tbt import server_tbt
from gpuprobe.validate.sizing import capacity_rps, plan_run, planned_phases, rate_line
from gpuprobe.validate.verdict import compare, measured_summaries, replay_range, tbt_tolerance


def prepare_workload(wl: pd.DataFrame, limit: int, token_scale: float, max_len: int) -> pd.DataFrame:
    """First `limit` requests, lengths scaled and clipped so prompt + output fits the model."""
    from gpuprobe.workloads.loading import by_arrival
    from gpuprobe.workloads.replay import scaled_lengths

    wl = by_arrival(wl).iloc[:limit]
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
    from gpuprobe.llama.config import resolve_model

    cfg = resolve_model(opts.model)
    wl = prepare_workload(workload, opts.limit, opts.token_scale, cfg.max_seq_len)
    cal = dict(opts.calibration)  # prefills calibrated up to the longest prompt replayed
    cal.setdefault("prefill_sizes", prefill_sizes_for(int(wl["prompt_tokens"].max()),
                                                      cfg.max_seq_len - 1))
    cal.setdefault("decode_prompts", decode_prompts_for(
        wl["prompt_tokens"] + wl["output_tokens"] / 2, cfg.max_seq_len))
    opts = replace(opts, calibration=tuple(cal.items()))
    t_start = time.time()
    say = lambda m: _say(m, progress)
    run = _measure(wl, opts, cfg.vocab_size, say)
    say(f"simulating {len(run.opts.layouts)} layouts x {run.opts.replays} replays x "
        f"{run.opts.sim_seeds} noise seeds")
    return _result(run, time.time() - t_start)


@dataclass
class _Measured:
    """What the servers measured, and the plan monolithic's first pass fixed."""
    opts: ValidateOptions  # with the plan's replays, noise seeds and interleaving
    probes: dict  # layout -> LayoutProbe
    capacity: float
    plan: object  # plan.Plan
    sched: pd.DataFrame  # the replayed schedule
    drift: dict
    at_server: dict  # layout -> TBT from the server's own rows
    quiet_cores: float  # foreign load below this was a quiet machine (PhaseGuard.quiet)


def _measure(wl: pd.DataFrame, opts: ValidateOptions, vocab_size: int, say) -> _Measured:
    """Per layout, monolithic first: start its server, calibrate, (monolithic) plan the run,
    replay; then the speed drift over the whole run and the run's dump."""
    from gpuprobe.validate.cpu_watch import PhaseGuard
    from gpuprobe.validate.layout_probe import LayoutProbe

    t0 = time.monotonic()
    order = ["monolithic"] + [x for x in opts.layouts if x != "monolithic"]
    probes, capacity, plan, sched = {}, None, None, None
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
            with watch.running(LayoutProbe(opts, layout, tmp, vocab_size, say)) as probe:
                start_s = time.monotonic() - t_up
                probe.calibrate(guard)
                if layout == "monolithic":
                    capacity, plan, sched, opts = _plan(wl, probe, opts, start_s, t0, guard, say)
                if layout in opts.layouts:
                    _replay(probe, sched, plan, guard, opts)
            probes[layout] = probe
        drift = drift_factors(speed_probe, probes, opts)
        dump_state(sched, probes, speed_probe, opts)
        at_server = {k: median_summary(server_tbt(probes[k].db, probes[k].replays))
                     for k in opts.layouts}
    return _Measured(opts, probes, capacity, plan, sched, drift, at_server, guard.quiet)


def _plan(wl, probe, opts: ValidateOptions, start_s: float, t0: float, guard, say):
    """Monolithic's first pass fixes the run: its simulated capacity, the plan under the budget
    (replays, noise seeds, interleaving), the replayed schedule; the guard is told the phases
    left. Returns (capacity, plan, schedule, options with the plan's settings)."""
    capacity = capacity_rps(wl, probe, opts)
    plan = plan_run(wl, capacity, probe, opts, start_s, time.monotonic() - t0)
    for line in plan.lines():
        say(line)
    opts = replace(opts, replays=plan.replays, sim_seeds=plan.sim_seeds, interleave=plan.interleave)
    sched = schedule_frame(wl, plan.rate)
    say(rate_line(capacity, plan.rate))
    left = planned_phases(plan)
    guard.replan(t0 + opts.budget_s - plan.sim_s, left,
                 (plan.total_s - plan.spent_s - plan.sim_s) / max(1, left))
    return capacity, plan, sched, opts


def _replay(probe, sched: pd.DataFrame, plan, guard, opts: ValidateOptions) -> None:
    """A layout's replays: interleaved with calibration passes as the plan allows, or all in
    a row followed by a recheck of its calibration shapes."""
    if opts.interleave:
        for i in range(opts.replays):
            probe.replay(sched, guard, 1)
            if plan.pass_after(i):
                probe.recalibrate_if_time(guard, last=i == opts.replays - 1)
    else:
        probe.replay(sched, guard, opts.replays)
        probe.recheck(guard)


def _result(run: _Measured, wall_s: float) -> dict:
    """Predicted against measured, with everything the run learned about its host."""
    opts, probes = run.opts, run.probes
    profile, predicted, confidence, stretch = predict_layouts(run.sched, probes, opts, run.drift)
    without = (predict_layouts(run.sched, probes, replace(opts, host_effects=False))[1]
               if opts.host_effects else predicted)
    per_replay = measured_summaries(probes, opts.layouts, opts.slo)
    measured = {layout: median_summary(s) for layout, s in per_replay.items()}
    rows = compare(predicted, measured)
    out = result_json(rows, predicted, measured, confidence, opts, run.capacity, run.plan.rate, profile,
                      wall_s, len(run.sched), tbt_tolerance(per_replay))
    out["plan"] = run.plan.to_dict()
    out["budget_s"] = opts.budget_s
    out["measured_range"] = replay_range(per_replay)
    out["server_tbt"] = run.at_server
    out["tbt_pool"] = {k: {m: s.get(m) for m in ("tbt_gaps", "tbt_first_share", "tbt_p99_first_share")}
                       for k, s in measured.items()}
    out["foreign_cores"] = {k: p.foreign_cores for k, p in probes.items()}
    out["front_stretch"] = stretch
    out["front_cpu"] = {k: vars(p.front_cpu) for k, p in probes.items() if p.front_cpu}
    out["speed_drift"] = run.drift
    effects = host_effects_of(probes, opts, run.drift)
    out["host_effects"] = {"applied": {k: v.get("host_effects", []) for k, v in predicted.items()},
                           "measured": effects.to_dict() if effects else None}
    out["recheck"] = {k: p.recheck_ratio for k, p in probes.items() if p.recheck_ratio}
    out["without_host_effects"] = unadjusted(without, measured, out["tbt_tolerance"])
    busy = {f"{k} {ph}": v for k, p in probes.items() for ph, v in p.foreign_cores.items()
            if v is not None and v >= run.quiet_cores}
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


