"""validate's side of the speed probe (speed_probe.py): start it on the server's cores, turn
its readings into per-replay, per-worker step-time factors (a host effect, sim/predict.py), and
dump what predictions are made from for offline re-runs.
"""
from __future__ import annotations

import numpy as np


def dump_state(sched, probes, speed_probe, opts=None) -> None:
    """GPUPROBE_VALIDATE_DUMP=path: pickle what the predictions are made from (the replay
    schedule, each layout's calibration and replays, the speed probe's readings, validate's
    options), so the model can be re-run on a run's measurements offline (repredict.py)."""
    import os
    import pickle

    from gpuprobe.store import Store

    path = os.environ.get("GPUPROBE_VALIDATE_DUMP")
    if not path:
        return
    keep = ("part", "overhead_s", "kv_bytes_per_token", "num_blocks", "front_cpu", "replays",
            "replay_windows", "foreign_cores", "recheck_window",
            "recheck_ratio", "cal_steps", "cal_requests", "recheck_steps", "cal_runs",
            "calibrate_windows")
    state = {k: {a: getattr(p, a) for a in keep} for k, p in probes.items()}
    for k, p in probes.items():  # every step and request row the server wrote, replays
        with Store.open(p.db, read_only=True) as store:  # included (diagnosis: the handoffs)
            state[k]["all_steps"] = store.steps()
            state[k]["all_requests"] = store.requests(source="server")
    with open(path, "wb") as fh:
        pickle.dump({"schedule": sched, "probes": state, "options": opts,
                     "speed_rows": speed_probe.samples() if speed_probe else None,
                     "speed_cores": speed_probe.cores if speed_probe else None}, fh)


def start_speed_probe(opts, say):
    """A running SpeedProbe on the cores the server will use, or a context giving None."""
    import contextlib
    import os

    if not opts.speed_probe or opts.device != "cpu" or not hasattr(os, "sched_getaffinity"):
        return contextlib.nullcontext()
    from gpuprobe.validate.speed_probe import SpeedProbe

    cores = tuple(dict(opts.server_opts).get("cores") or sorted(os.sched_getaffinity(0)))
    say(f"speed probe on cores {','.join(map(str, cores))}")
    return SpeedProbe(cores)


def drift_factors(probe, probes: dict, opts) -> dict[str, list[dict[str, float]]]:
    """{layout: per replay {worker: slowness vs that layout's calibration}}; {} without a probe."""
    if probe is None:
        return {}
    from gpuprobe.validate.speed_probe import replay_factors, worker_cores

    rows = probe.samples()
    out = {}
    for layout, p in probes.items():
        if layout in opts.layouts:
            workers = worker_cores(layout, probe.cores, opts.prefill_share)
            out[layout] = [{k: round(v, 4) for k, v in f.items()} for f in
                           replay_factors(rows, p.calibrate_windows, p.replay_windows, workers)]
    return out
