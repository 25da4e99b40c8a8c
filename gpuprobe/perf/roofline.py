"""A profile from spec sheets: peak FLOP/s, memory and link bandwidth, and the model's shape.

For a worker of `tp` devices (its weights, FLOPs and KV heads split tp ways):

    prefill step   a = weight bytes / tp / (BW * eff_mem)    (weights stream once per step)
                   b = 2 * params / tp / (peak * eff_flops)  (matmuls: 2 FLOPs per param per token)
                   c = 2 * layers * dim / tp / (peak * eff_flops)   (causal attention over Q)
    decode step    d0 = weight bytes / tp / (BW * eff_mem) + launch_s
                   d1 = 2 * params / tp / (peak * eff_flops)
                   d2 = KV bytes per token per device / (BW * eff_mem)  (each decode reads its context)
    all-reduce     tp > 1: two per layer, of the step's tokens x dim x 2 bytes, as a ring:
                   ALLREDUCE_LATENCY_S + 2 (tp - 1) / tp * bytes / link bandwidth, added to a
                   and b (prefill) and d0 and d1 (decode)
    KV handoff     KV bytes / link bandwidth + latency

A real step is closer to max(compute, memory) than to their sum; the sum overestimates by up
to 2x near the crossover (short prefills). Efficiencies are typical achieved fractions, not
measurements: every roofline curve says so (origin 'roofline', confidence low, no R^2).
GPU figures: gpuprobe/perf/specs.py. The cross-machine network defaults to one 400 Gb/s NIC
(50 GB/s), an assumption. Each worker's KV capacity comes from memory.py.
"""
from __future__ import annotations

from gpuprobe.perf.costmodel import Link, Overhead, Profile, StepCost, simple_worker
from gpuprobe.perf.memory import DEFAULT_GPU_MEMORY_UTILIZATION, with_memory, worker_memory
from gpuprobe.perf.tp_family import build_family
from gpuprobe.perf.specs import GPUS, GpuSpec, ModelShape, check_tp, gpu, model_shape

__all__ = ["GPUS", "GpuSpec", "ModelShape", "gpu", "model_shape", "roofline_profile", "spec_links",
           "worker"]

REASON = "roofline estimate from datasheet figures and assumed efficiencies, not measured"
NETWORK_BYTES_PER_S = 50e9
# One all-reduce's fixed cost: NCCL's small-message latency on NVLink, the 10 us
# AIConfigurator's system files take for a device-to-device hop.
ALLREDUCE_LATENCY_S = 10e-6


def allreduce_s(spec: GpuSpec, tp: int, dim: int, dtype_bytes: int = 2) -> tuple[float, float]:
    """(seconds per all-reduce, seconds per token of it) of a ring all-reduce over tp devices."""
    if tp <= 1:
        return 0.0, 0.0
    return ALLREDUCE_LATENCY_S, 2 * (tp - 1) / tp * dim * dtype_bytes / spec.link_bytes_per_s


def worker(spec: GpuSpec, shape: ModelShape, eff_flops: float = 0.5, eff_mem: float = 0.8,
           launch_s: float = 1e-3, share: float = 1.0, tp: int = 1) -> StepCost:
    """Step-time curves of `shape` on `tp` devices of `spec` (or on `share` of one). Seconds."""
    flops = spec.peak_flops * eff_flops * share * tp
    bw = spec.mem_bytes_per_s * eff_mem * share
    weights_s = shape.weights_bytes(tp) / bw
    per_token = 2 * shape.params / flops
    ar0, ar1 = (2 * shape.layers * x for x in allreduce_s(spec, tp, shape.dim, shape.dtype_bytes))
    return simple_worker(a=weights_s + launch_s + ar0, b=per_token + ar1,
                         c=2 * shape.layers * shape.dim / flops,
                         d0=weights_s + launch_s + ar0, d1=per_token + ar1,
                         d2=shape.kv_bytes_per_token_per_device(tp) / bw,
                         source="roofline", reasons=(REASON,), tp=tp)


def spec_links(main: GpuSpec, prefill: GpuSpec, eff_mem: float = 0.8,
               network_bytes_per_s: float = NETWORK_BYTES_PER_S) -> dict[str, Link]:
    """KV handoff links from the datasheets: intra copies in device memory, cross goes over the
    prefill host's link or the network, whichever is slower."""
    return {"intra": Link(10e-6, main.mem_bytes_per_s * eff_mem, "roofline"),
            "cross": Link(50e-6, min(network_bytes_per_s, prefill.link_bytes_per_s), "roofline")}


def roofline_profile(model: str, gpu_name: str = "h200", prefill_gpu: str | None = None,
                     decode_gpu: str | None = None, prefill_share: float = 0.5,
                     eff_flops: float = 0.5, eff_mem: float = 0.8,
                     network_bytes_per_s: float = NETWORK_BYTES_PER_S, tp: int = 1,
                     prefill_tp: int | None = None, decode_tp: int | None = None,
                     gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION) -> Profile:
    """Profile for `model` on `gpu_name`; cross layouts may put prefill and decode on other GPUs
    and other TP sizes. A worker whose model does not fit its devices is a UserError naming
    the numbers (memory.py).

    intra: one GPU (or TP group) split by SM share (prefill gets prefill_share of compute and
    bandwidth)."""
    shape = model_shape(model)
    main = gpu(gpu_name)
    pre, dec = gpu(prefill_gpu or gpu_name), gpu(decode_gpu or gpu_name)
    kw = dict(eff_flops=eff_flops, eff_mem=eff_mem)
    tps = {"main": tp, "pre": prefill_tp or tp, "dec": decode_tp or tp}
    for t in tps.values():
        check_tp(shape, t)

    specs = {"monolithic": main, "cross.prefill": pre, "cross.decode": dec}
    keys = {"monolithic": tps["main"], "cross.prefill": tps["pre"], "cross.decode": tps["dec"]}
    shares = {"intra.prefill": prefill_share, "intra.decode": 1 - prefill_share}

    def make(key: str, size: int) -> StepCost:
        if key in shares:
            return worker(main, shape, share=shares[key], tp=size, **kw)
        return worker(specs[key], shape, tp=size, **kw)

    workers = {key: make(key, keys.get(key, keys["monolithic"]))
               for key in ("monolithic", *shares, "cross.prefill", "cross.decode")}
    fits = worker_memory(shape, specs, keys, gpu_memory_utilization)
    workers = with_memory(workers, fits, shape, specs)
    links = spec_links(main, pre, eff_mem, network_bytes_per_s)
    tp_name = "" if set(tps.values()) == {1} else f"-tp{tp}"
    return Profile(workers=workers, links=links, overhead=Overhead(source="roofline"),
                   kv_bytes_per_token=shape.kv_bytes_per_token, prefill_share=prefill_share,
                   name=f"roofline-{model}-{gpu_name}{tp_name}",
                   meta={"source": "roofline", "model": model, "gpu": main.name,
                         "prefill_gpu": pre.name, "decode_gpu": dec.name,
                         "eff_flops": eff_flops, "eff_mem": eff_mem,
                         "tp": tps["main"], "prefill_tp": tps["pre"], "decode_tp": tps["dec"],
                         "gpu_memory_utilization": gpu_memory_utilization,
                         "memory": {k: f.to_dict() for k, f in fits.items()}},
                   tp_workers=build_family(shape, specs, make, gpu_memory_utilization))
