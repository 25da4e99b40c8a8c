"""What validate predicts: the profile it assembles from its layouts' calibrations, the host
effects it measured, and each layout's prediction through the one prediction path
(sim/predict.py), the same one `gpuprobe simulate` takes on that profile."""
from __future__ import annotations

import time

import pandas as pd

from gpuprobe.validate.options import ValidateOptions


def validate_profile(probes: dict, opts: ValidateOptions):
    """The profile validate assembles from its layouts' calibrations: every worker's step
    costs, the links, the front's overhead, and each split layout's extra front path
    (meta['split_in_s'], predict.layout_profile); meta says what it was measured on."""
    from gpuprobe.perf.costmodel import Overhead
    from gpuprobe.perf.profile import assemble
    from gpuprobe.validate.layout_probe import scheduler_configs

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
    from gpuprobe.sim.predict import HostEffects

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
    from gpuprobe.sim.predict import predict
    from gpuprobe.validate.layout_probe import scheduler_configs

    profile = validate_profile(probes, opts)
    configs = scheduler_configs(probes)
    effects = host_effects_of(probes, opts, drift)
    predicted = {x: predict(sim_wl, profile, x, opts.slo, configs, opts.sim_seeds,
                            host_effects=effects) for x in opts.layouts}
    return (profile, predicted, {x: s["confidence"] for x, s in predicted.items()},
            {x: s["front_stretch"] for x, s in predicted.items()})
