"""What if: the decision again for a stored recommendation's workload slice with another SLO,
device count, GPU or price (the dashboard's Recommend page). Not stored.

    rec2 = what_if(store, rec, WhatIfInputs(ttft_s=1.0, tpot_s=0.2, devices=4, gpu="h100"))

GPU what-ifs take `profile --spec`'s profile (gpuprobe.perf.roofline.roofline_profile) of a
model shape; "measured" takes the profile the recommendation was made with, from the store.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

from gpuprobe.errors import UserError

MEASURED = "measured"  # the gpu choice that keeps the recommendation's own profile


@dataclass(frozen=True)
class WhatIfInputs:
    ttft_s: float
    tpot_s: float
    devices: int
    gpu: str = MEASURED              # MEASURED or a roofline preset: h200, h100, a100, l40s
    model_shape: str = "llama3-8b"   # the roofline's model shape, for a GPU what-if
    price: float | None = None       # USD per device-hour; None: the list price


def what_if(store, rec, inputs: WhatIfInputs):
    """The Recommendation (not stored) for rec's workload slice under `inputs`. UserError
    when the workload or the measured profile is not in the store; NoLayoutMeets when no
    layout meets the asked SLO."""
    from gpuprobe.decide.decision import DecisionOptions, WhatIf, run_decision
    from gpuprobe.workloads.loading import load_workload

    w = rec.workload
    if not w.get("name"):
        raise UserError(f"recommendation {rec.id} names no workload to ask again about")
    wl = load_workload(store, w["name"])
    slo = replace(rec.slo, ttft_s=float(inputs.ttft_s), tpot_s=float(inputs.tpot_s), name="what-if")
    opts = DecisionOptions(
        max_devices=int(inputs.devices), cost_per_device_hour=inputs.price,
        what_if=WhatIf(rate=w.get("rate_rps"), prompt_scale=float(w.get("prompt_scale") or 1.0),
                       token_scale=float(w.get("token_scale") or 1.0), limit=w.get("limit")))
    return run_decision(wl, profile_for(store, rec, inputs), slo, opts, store=None,
                        workload_name=w["name"])


def profile_for(store, rec, inputs: WhatIfInputs):
    from gpuprobe.perf.costmodel import Profile
    if inputs.gpu != MEASURED:
        from gpuprobe.perf.roofline import roofline_profile
        return roofline_profile(inputs.model_shape, inputs.gpu)
    body = stored_profile(store, rec.profile.get("name"))
    if body is None:
        raise UserError(f"the profile {rec.profile.get('name')!r} that recommendation {rec.id} was "
                        f"made with is not in the store: pick a GPU, or store it with gpuprobe "
                        f"profile --target URL")
    return Profile.from_dict(body)


def stored_profile(store, name: str | None) -> dict | None:
    """The newest stored profile called `name` (by the name it was stored under, or its
    own), else the newest one of all when the store holds only one."""
    from gpuprobe.store import reads
    bodies = [(r.name, json.loads(r.body)) for r in reads.profiles(store).itertuples() if r.body]
    for stored_name, body in bodies:
        if name and name in (stored_name, body.get("name")):
            return body
    return bodies[0][1] if len(bodies) == 1 else None
