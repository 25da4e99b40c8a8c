"""The same five workers at every tensor-parallel size, so a layout search can weigh TP.

A spec profile (`profile --spec`) keeps, beside the workers at the TP sizes it was asked for,
the five workers (monolithic, intra.prefill, intra.decode, cross.prefill, cross.decode) at
each size of TP_SIZES that the model's heads divide: `Profile.tp_workers[tp][key]`. recommend
weighs TP 1/2/4/8 from the file alone: no silicon data to load, nothing recomputed. A size
whose model does not fit its devices keeps the worker with max_kv_tokens 0 and the numbers in
its reasons (`does not fit: ...`), so the search can say why it skipped that size.

A measured profile has no others: its workers run at the TP they were measured at.

    at = profile_at(profile, tp=2, prefill_tp=1, decode_tp=4)   # a Profile with those workers
    tp_options(profile)["monolithic"]                           # {tp: StepCost} it can run at
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from gpuprobe.perf.costmodel import WORKERS, Profile, StepCost
from gpuprobe.perf.memory import TP_SIZES, with_memory, worker_memory
from gpuprobe.perf.specs import GpuSpec, ModelShape

SIDES = ("monolithic", "cross.prefill", "cross.decode")  # the keys that carry their own GPU
NOT_FIT = "does not fit: "


def build_family(shape: ModelShape, specs: dict[str, GpuSpec],
                 make: Callable[[str, int], StepCost], gpu_memory_utilization: float,
                 sizes: tuple[int, ...] = TP_SIZES) -> dict[int, dict[str, StepCost]]:
    """{tp: {worker key: StepCost}} for each size in `sizes` the shape splits over.
    make(key, tp): the worker of `key` (WORKERS) on tp devices, before memory; specs by SIDES.
    Each worker gets the KV tokens its memory holds; one that does not fit keeps 0 and why."""
    out: dict[int, dict[str, StepCost]] = {}
    for tp in sizes:
        if shape.n_heads % tp or shape.hidden_dim % tp:
            continue
        workers = {key: make(key, tp) for key in WORKERS}
        fits = worker_memory(shape, specs, dict.fromkeys(SIDES, tp), gpu_memory_utilization)
        out[tp] = with_memory(workers, fits, shape, specs, refuse=False)
    return out


def refusal(w: StepCost) -> str | None:
    """Why a worker cannot run (its memory's numbers), or None when it can."""
    if w.max_kv_tokens != 0:
        return None
    return next((r[r.index(NOT_FIT):] for r in w.reasons if NOT_FIT in r),
                "does not fit: no KV cache left")


def tp_options(profile: Profile) -> dict[str, dict[int, StepCost]]:
    """{worker key: {tp: StepCost}} for every key of WORKERS: the profile's own worker at its
    TP, and the other sizes of its tp_workers. Workers that do not fit are included (see
    refusal()), so a caller can tell 'not fitting' from 'not known'."""
    out: dict[str, dict[int, StepCost]] = {}
    for key in WORKERS:
        layout, _, role = key.partition(".")
        own = profile.worker(layout, role or "mixed")
        sizes = {tp: ws[key] for tp, ws in sorted(profile.tp_workers.items()) if key in ws}
        sizes[own.tp] = own
        out[key] = dict(sorted(sizes.items()))
    return out


def profile_at(profile: Profile, tp: int = 1, prefill_tp: int = 1, decode_tp: int = 1) -> Profile:
    """The profile with monolithic and intra on `tp` devices and cross's prefill and decode
    workers on prefill_tp and decode_tp; `profile` itself where those are its own sizes.
    ValueError naming a size the profile has no workers for."""
    want = {"monolithic": tp, "intra.prefill": tp, "intra.decode": tp,
            "cross.prefill": prefill_tp, "cross.decode": decode_tp}
    workers = dict(profile.workers)
    changed = False
    for key, size in want.items():
        layout, _, role = key.partition(".")
        if profile.worker(layout, role or "mixed").tp == size:
            continue
        other = profile.tp_workers.get(size, {}).get(key)
        if other is None:
            raise ValueError(f"profile {profile.name} has no {key} worker at TP{size} (a measured "
                             f"profile runs at the TP it was measured at; profile --spec has all)")
        workers[key], changed = other, True
    return replace(profile, workers=workers) if changed else profile

