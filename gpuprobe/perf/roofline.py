"""A profile from spec sheets: peak FLOP/s, memory and link bandwidth, and the model's shape.

    prefill step   a = weight bytes / (BW * eff_mem)    (weights stream once per step)
                   b = 2 * params / (peak * eff_flops)  (matmuls: 2 FLOPs per param per token)
                   c = 2 * layers * dim / (peak * eff_flops)   (causal attention over Q)
    decode step    d0 = weight bytes / (BW * eff_mem) + launch_s
                   d1 = 2 * params / (peak * eff_flops)
                   d2 = KV bytes per token / (BW * eff_mem)    (every decode reads its context)
    KV handoff     KV bytes / link bandwidth + latency

A real step is closer to max(compute, memory) than to their sum; the sum overestimates by up
to 2x near the crossover (short prefills). Efficiencies are typical achieved fractions, not
measurements: every roofline fit is marked 'low' confidence for that reason.

Figures (dense BF16 tensor-core peak, no sparsity; memory bandwidth; device link), from the
vendors' datasheets: NVIDIA H200 SXM (989 TFLOP/s, 4.8 TB/s HBM3e, NVLink 900 GB/s),
H100 SXM (989 TFLOP/s, 3.35 TB/s HBM3, NVLink 900 GB/s), A100 SXM 80GB (312 TFLOP/s,
2.039 TB/s HBM2e, NVLink 600 GB/s), L40S (362 TFLOP/s, 864 GB/s GDDR6, PCIe Gen4 x16 64 GB/s).
The cross-machine network defaults to one 400 Gb/s NIC (50 GB/s), an assumption.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.errors import UserError
from gpuprobe.perf.costmodel import Link, Overhead, Profile, StepCost, simple_worker

REASON = "roofline estimate from datasheet figures and assumed efficiencies, not measured"


@dataclass(frozen=True)
class GpuSpec:
    name: str
    peak_flops: float          # dense BF16 FLOP/s
    mem_bytes_per_s: float
    link_bytes_per_s: float    # device-to-device on one host (NVLink or PCIe)
    mem_bytes: float


GPUS = {
    "h200": GpuSpec("H200 SXM", 989e12, 4.8e12, 900e9, 141e9),
    "h100": GpuSpec("H100 SXM", 989e12, 3.35e12, 900e9, 80e9),
    "a100": GpuSpec("A100 SXM 80GB", 312e12, 2.039e12, 600e9, 80e9),
    "l40s": GpuSpec("L40S", 362e12, 864e9, 64e9, 48e9),
}
NETWORK_BYTES_PER_S = 50e9
MODEL_ALIASES = {"llama3-8b": "llama3-8b-shape"}


@dataclass(frozen=True)
class ModelShape:
    params: int
    layers: int
    dim: int
    kv_bytes_per_token: int
    dtype_bytes: int = 2


def model_shape(name: str, dtype_bytes: int = 2) -> ModelShape:
    """A named model preset (gpuprobe.model.config, torch-free) as the numbers the roofline needs."""
    from gpuprobe.model.config import PRESETS

    cfg = PRESETS.get(MODEL_ALIASES.get(name, name))
    if cfg is None:
        raise UserError(f"unknown model shape {name!r}; choose from "
                        f"{', '.join(sorted({*PRESETS, *MODEL_ALIASES}))}")
    return ModelShape(cfg.num_params, cfg.n_layers, cfg.dim,
                      cfg.kv_bytes_per_token(dtype_bytes), dtype_bytes)


def gpu(name: str) -> GpuSpec:
    spec = GPUS.get(name.lower())
    if spec is None:
        raise UserError(f"unknown GPU spec {name!r}; choose from {', '.join(GPUS)}")
    return spec


def worker(spec: GpuSpec, shape: ModelShape, eff_flops: float = 0.5, eff_mem: float = 0.8,
           launch_s: float = 1e-3, share: float = 1.0) -> StepCost:
    """Step-time curves of `shape` on `spec` (or on `share` of it). Seconds."""
    flops = spec.peak_flops * eff_flops * share
    bw = spec.mem_bytes_per_s * eff_mem * share
    weights_s = shape.params * shape.dtype_bytes / bw
    per_token = 2 * shape.params / flops
    return simple_worker(a=weights_s + launch_s, b=per_token, c=2 * shape.layers * shape.dim / flops,
                         d0=weights_s + launch_s, d1=per_token, d2=shape.kv_bytes_per_token / bw,
                         source="roofline", reasons=(REASON,))


def roofline_profile(model: str, gpu_name: str = "h200", prefill_gpu: str | None = None,
                     decode_gpu: str | None = None, prefill_share: float = 0.5,
                     eff_flops: float = 0.5, eff_mem: float = 0.8,
                     network_bytes_per_s: float = NETWORK_BYTES_PER_S) -> Profile:
    """Profile for `model` on `gpu_name`; cross layouts may put prefill and decode on other GPUs.

    intra: one GPU split by SM share (prefill gets prefill_share of compute and bandwidth).
    """
    shape = model_shape(model)
    main = gpu(gpu_name)
    pre, dec = gpu(prefill_gpu or gpu_name), gpu(decode_gpu or gpu_name)
    kw = dict(eff_flops=eff_flops, eff_mem=eff_mem)
    workers = {
        "monolithic": worker(main, shape, **kw),
        "intra.prefill": worker(main, shape, share=prefill_share, **kw),
        "intra.decode": worker(main, shape, share=1 - prefill_share, **kw),
        "cross.prefill": worker(pre, shape, **kw),
        "cross.decode": worker(dec, shape, **kw),
    }
    links = {"intra": Link(10e-6, main.mem_bytes_per_s * eff_mem, "roofline"),
             "cross": Link(50e-6, min(network_bytes_per_s, pre.link_bytes_per_s), "roofline")}
    return Profile(workers=workers, links=links, overhead=Overhead(source="roofline"),
                   kv_bytes_per_token=shape.kv_bytes_per_token, prefill_share=prefill_share,
                   name=f"roofline-{model}-{gpu_name}",
                   meta={"source": "roofline", "model": model, "gpu": main.name,
                         "prefill_gpu": pre.name, "decode_gpu": dec.name,
                         "eff_flops": eff_flops, "eff_mem": eff_mem})
