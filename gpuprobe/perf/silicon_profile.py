"""Profiles from measured silicon data, with the roofline as the fallback that says so.

silicon.compose() gives step times on a grid of sizes, summed from AIConfigurator's kernel
timings for the GPU, engine and engine version; here gpuprobe's own StepCost form is fitted
to them, so the simulator, recommend and validate read a silicon profile like any other:

    prefill  a + b*T + c*T^2   fitted on prompts of FIT_MIN_PREFILL to 16,384 tokens,
                               relative residuals (a 10 ms step weighs as much as a 200 ms one)
    decode   d0 + d1*B + d2*C  C = B x context, on 1-512 sequences x 128-8,192 tokens

Below FIT_MIN_PREFILL a prefill is one read of the weights whatever its length, a floor the
summed terms cannot follow; the fit is let go there (its error is in the profile's meta) so
that it holds within a few percent where prompts are. A worker of `tp` devices carries tp and
the KV tokens its memory holds (memory.py); the two intra engines share one device (group),
each at its share of the SMs, derived from the whole device's curves ('interpolated').
"""
from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from gpuprobe.errors import UserError
from gpuprobe.perf import silicon
from gpuprobe.perf.costmodel import (DECODE_TERMS, PREFILL_TERMS, Overhead, Profile, StepCost,
                                     interpolated)
from gpuprobe.perf.fit import least_squares
from gpuprobe.perf.memory import (DEFAULT_GPU_MEMORY_UTILIZATION, MemoryFit, memory_fit,
                                   with_memory, worker_memory)
from gpuprobe.perf.roofline import roofline_profile, spec_links
from gpuprobe.perf.roofline import worker as roofline_worker
from gpuprobe.perf.tp_family import build_family
from gpuprobe.perf.specs import GpuSpec, ModelShape, check_tp, gpu, model_shape

FIT_MIN_PREFILL = 128
MIN_MEASURED_SHARE = 0.5  # below it, a curve is more AIConfigurator's formulas than its tables


def resolve_gpu(name: str) -> GpuSpec:
    """gpuprobe's GPU table first (h200, h100, ...), else a system AIConfigurator has a file
    for (gb200, b300_sxm, ...)."""
    try:
        return gpu(name)
    except UserError:
        try:
            return silicon.system_gpu(name.lower())
        except silicon.Unavailable:
            raise UserError(f"unknown GPU spec {name!r}: not gpuprobe's (h200, h100, a100, "
                            f"l40s, b200) nor an AIConfigurator system") from None


@functools.lru_cache(maxsize=64)
def silicon_worker(shape: ModelShape, data: silicon.SiliconData, tp: int = 1) -> tuple[StepCost, dict]:
    """(StepCost of `shape` on `tp` devices from `data`, notes on the fit for the meta; read
    only, as it is cached: a search over TP sizes asks for the same worker many times)."""
    pre, dec = silicon.compose(shape, data, tp)
    what = f"{data.system} {data.engine} {data.version} TP{tp}"
    fit_part = pre[pre["prompt_tokens"] >= FIT_MIN_PREFILL]
    T = fit_part["prompt_tokens"].to_numpy(float)
    prefill = least_squares(np.c_[np.ones(len(T)), T, T * T], fit_part["step_s"].to_numpy(),
                            PREFILL_TERMS, T, f"prefill ({what})", relative=True)
    B = dec["batch"].to_numpy(float)
    C = B * dec["context_tokens"].to_numpy(float)
    decode = least_squares(np.c_[np.ones(len(B)), B, C], dec["step_s"].to_numpy(), DECODE_TERMS,
                           B, f"decode ({what})", relative=True)
    prefill, decode = (_as_silicon(f, part, name) for f, part, name in
                       ((prefill, fit_part, "prefill"), (decode, dec, "decode")))
    small = pre[pre["prompt_tokens"] < FIT_MIN_PREFILL]
    t = small["prompt_tokens"].to_numpy(float)
    under = np.c_[np.ones(len(t)), t, t * t] @ np.array(prefill.coef) / small["step_s"].to_numpy() - 1
    notes = {"prefill_fit_from_tokens": FIT_MIN_PREFILL,
             "prefill_error_below": float(np.min(under)) if len(under) else 0.0,
             "measured_share": {"prefill": float(pre["step_s"].dot(pre["measured_share"])
                                                 / pre["step_s"].sum()),
                                "decode": float(dec["step_s"].dot(dec["measured_share"])
                                                / dec["step_s"].sum())}}
    return StepCost(prefill=prefill, decode=decode, tp=tp), notes


def _as_silicon(fit, points, name: str):
    share = float(points["step_s"].dot(points["measured_share"]) / points["step_s"].sum())
    reasons = fit.reasons
    if share < MIN_MEASURED_SHARE:
        reasons += (f"{name}: only {share:.0%} of the step time from measured kernel tables, "
                    "the rest from AIConfigurator's formulas",)
    return replace(fit, source="silicon", reasons=reasons)


def silicon_profile(model: str, gpu_name: str, engine: str = "vllm", version: str | None = None,
                    tp: int = 1, prefill_gpu: str | None = None, decode_gpu: str | None = None,
                    prefill_tp: int | None = None, decode_tp: int | None = None,
                    prefill_share: float = 0.5,
                    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION) -> Profile:
    """A profile whose curves come from measured silicon data; silicon.Unavailable when a
    GPU or engine has none (spec_profile() falls back to the roofline), UserError when the
    model does not fit a worker's devices."""
    shape = model_shape(model)
    names = {"monolithic": gpu_name, "cross.prefill": prefill_gpu or gpu_name,
             "cross.decode": decode_gpu or gpu_name}
    tps = {"monolithic": tp, "cross.prefill": prefill_tp or tp, "cross.decode": decode_tp or tp}
    specs = {k: resolve_gpu(n) for k, n in names.items()}
    for t in tps.values():
        check_tp(shape, t)
    data = {k: silicon.open_data(s.silicon_system or s.name, engine, version)
            for k, s in specs.items()}
    built: dict = {}
    workers, notes = {}, {}
    for key in ("monolithic", "cross.prefill", "cross.decode"):
        at = (data[key], tps[key])
        if at not in built:
            built[at] = silicon_worker(shape, *at)
        workers[key], notes[key] = built[at][0], dict(built[at][1])
    def make(key: str, tp: int) -> StepCost:
        if key.startswith("intra."):
            share = prefill_share if key == "intra.prefill" else 1 - prefill_share
            return replace(interpolated(make("monolithic", tp)), scale=share ** -1.0,
                           reasons=(f"{key} derived from the whole device at share {share:.2f}",))
        return silicon_worker(shape, data[key], tp)[0]

    for key in ("intra.prefill", "intra.decode"):
        workers[key] = make(key, tps["monolithic"])
    fits = worker_memory(shape, specs, tps, gpu_memory_utilization)
    workers = with_memory(workers, fits, shape, specs)
    main = specs["monolithic"]
    return Profile(workers=workers, links=spec_links(main, specs["cross.prefill"]),
                   overhead=Overhead(), kv_bytes_per_token=shape.kv_bytes_per_token,
                   prefill_share=prefill_share,
                   name=f"silicon-{model}-{data['monolithic'].system}-{engine}-tp{tp}",
                   meta={"source": "silicon", "model": model, "gpu": main.name,
                         "engine": engine, "prefill_gpu": specs["cross.prefill"].name,
                         "decode_gpu": specs["cross.decode"].name, "tp": tps["monolithic"],
                         "prefill_tp": tps["cross.prefill"], "decode_tp": tps["cross.decode"],
                         "silicon": {k: vars(d) for k, d in data.items()},
                         "silicon_fit": notes,
                         "gpu_memory_utilization": gpu_memory_utilization,
                         "memory": {k: f.to_dict() for k, f in fits.items()}},
                   tp_workers=build_family(shape, specs, make, gpu_memory_utilization))


def tp_worker(model: str, gpu_name: str, engine: str | None = "vllm", tp: int = 1,
              gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
              version: str | None = None) -> tuple[StepCost, MemoryFit]:
    """One worker of `tp` devices for a search over layouts: (its StepCost, from silicon data
    where it exists, else the roofline with the reason, carrying tp and max_kv_tokens (0 when
    the model does not fit); its MemoryFit: fits?, weights and KV bytes per device, why())."""
    shape, spec = model_shape(model), resolve_gpu(gpu_name)
    check_tp(shape, tp)
    fit = memory_fit(shape, spec, tp, gpu_memory_utilization)
    try:
        if engine is None:
            raise silicon.Unavailable("the roofline was asked for")
        cost = silicon_worker(shape, silicon.open_data(spec.silicon_system or spec.name,
                                                       engine, version), tp)[0]
    except silicon.Unavailable as exc:
        cost = roofline_worker(spec, shape, tp=tp)
        if engine is not None:
            cost = replace(cost, reasons=cost.reasons + (f"no measured silicon data ({exc}); "
                                                         "roofline instead",))
    return replace(cost, max_kv_tokens=fit.max_kv_tokens if fit.fits else 0), fit


def spec_profile(model: str, gpu_name: str, engine: str | None = "vllm", **kw) -> Profile:
    """The silicon profile where the data has the GPU and engine; else the roofline, each of
    its workers saying why (engine None: the roofline, as asked). kw: silicon_profile's."""
    why = None
    if engine is not None:
        try:
            return silicon_profile(model, gpu_name, engine, **kw)
        except silicon.Unavailable as exc:
            why = f"no measured silicon data ({exc}); roofline instead"
    kw.pop("version", None)
    try:
        prof = roofline_profile(model, gpu_name, **kw)
    except UserError as exc:
        if why is None or not str(exc).startswith("unknown GPU"):
            raise
        raise UserError(f"{gpu_name}: {why[:why.index('; roofline')]}, and {exc}") from None
    if why is None:
        return prof
    workers = {k: replace(w, reasons=w.reasons + (why,)) for k, w in prof.workers.items()}
    return replace(prof, workers=workers, meta={**prof.meta, "fallback": why})
