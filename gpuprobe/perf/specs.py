"""GPUs and model shapes as the cost models read them: datasheet figures, and a Llama shape's
sizes split over a tensor-parallel group.

GPU figures (dense BF16 tensor-core peak, no sparsity; memory bandwidth; device link; memory
capacity as the driver reports it, in GiB), from the vendors' datasheets and, for capacity,
AIConfigurator's system files (which list them the same way): NVIDIA H200 SXM (989 TFLOP/s,
4.8 TB/s HBM3e, NVLink 900 GB/s, 141 GiB), H100 SXM (989 TFLOP/s, 3.35 TB/s HBM3, NVLink
900 GB/s, 80 GiB), A100 SXM 80GB (312 TFLOP/s, 2.039 TB/s HBM2e, NVLink 600 GB/s, 80 GiB),
L40S (362 TFLOP/s, 864 GB/s GDDR6, PCIe Gen4 x16 64 GB/s, 46,068 MiB), B200 (2,250 TFLOP/s,
7.7 TB/s HBM3e, NVLink 1.8 TB/s, 180 GiB).
"""
from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.errors import UserError

GIB = 1 << 30


@dataclass(frozen=True)
class GpuSpec:
    name: str
    peak_flops: float          # dense BF16 FLOP/s
    mem_bytes_per_s: float
    link_bytes_per_s: float    # device-to-device on one host (NVLink or PCIe)
    mem_bytes: float           # one device's memory, as the driver reports it
    silicon_system: str = ""   # AIConfigurator's name for it (its data's folder)


GPUS = {
    "h200": GpuSpec("H200 SXM", 989e12, 4.8e12, 900e9, 141 * GIB, "h200_sxm"),
    "h100": GpuSpec("H100 SXM", 989e12, 3.35e12, 900e9, 80 * GIB, "h100_sxm"),
    "a100": GpuSpec("A100 SXM 80GB", 312e12, 2.039e12, 600e9, 80 * GIB, "a100_sxm"),
    "l40s": GpuSpec("L40S", 362e12, 864e9, 64e9, 46068 * (1 << 20), "l40s"),
    "b200": GpuSpec("B200", 2250e12, 7.7e12, 1.8e12, 180 * GIB, "b200_sxm"),
}
MODEL_ALIASES = {"llama3-8b": "llama3-8b-shape", "llama3-70b": "llama3-70b-shape"}


@dataclass(frozen=True)
class ModelShape:
    """A Llama-family model's sizes. Per-device figures take the tensor-parallel size `tp`:
    weights split tp ways, KV heads too until there are fewer heads than devices (then each
    device keeps one, as vLLM replicates them)."""

    params: int
    layers: int
    dim: int
    kv_bytes_per_token: int        # the whole model's, K and V over all layers
    dtype_bytes: int = 2
    name: str = ""
    n_heads: int = 0
    n_kv_heads: int = 0
    head_dim: int = 0
    hidden_dim: int = 0
    vocab_size: int = 0
    max_seq_len: int = 0

    def weights_bytes(self, tp: int = 1) -> float:
        """One device's share of the weights (the small replicated norms ignored)."""
        return self.params * self.dtype_bytes / tp

    def kv_heads_per_device(self, tp: int = 1) -> int:
        return max(1, self.n_kv_heads // tp)

    def kv_bytes_per_token_per_device(self, tp: int = 1) -> int:
        """KV-cache bytes one token position takes on each device of a tp group."""
        return self.layers * 2 * self.kv_heads_per_device(tp) * self.head_dim * self.dtype_bytes


def model_shape(name: str, dtype_bytes: int = 2) -> ModelShape:
    """A named model preset (gpuprobe.llama.config, torch-free) as the numbers the cost models
    need. Aliases: llama3-8b, llama3-70b."""
    from gpuprobe.llama.config import PRESETS

    cfg = PRESETS.get(MODEL_ALIASES.get(name, name))
    if cfg is None:
        raise UserError(f"unknown model shape {name!r}; choose from "
                        f"{', '.join(sorted({*PRESETS, *MODEL_ALIASES}))}")
    return ModelShape(cfg.num_params, cfg.n_layers, cfg.dim, cfg.kv_bytes_per_token(dtype_bytes),
                      dtype_bytes, name=name, n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads,
                      head_dim=cfg.head_dim, hidden_dim=cfg.hidden_dim,
                      vocab_size=cfg.vocab_size, max_seq_len=cfg.max_seq_len)


def gpu(name: str) -> GpuSpec:
    """A GPU by gpuprobe's name (h200) or AIConfigurator's (h200_sxm)."""
    key = name.lower()
    spec = GPUS.get(key) or next((g for g in GPUS.values() if g.silicon_system == key), None)
    if spec is None:
        raise UserError(f"unknown GPU spec {name!r}; choose from {', '.join(GPUS)}")
    return spec


def check_tp(shape: ModelShape, tp: int) -> None:
    """A tensor-parallel size the shape splits evenly over (attention heads, FFN width)."""
    if tp < 1 or shape.n_heads % tp or shape.hidden_dim % tp:
        raise UserError(f"--tp {tp}: {shape.name or 'the model'} has {shape.n_heads} attention "
                        f"heads and an FFN of {shape.hidden_dim}; the TP size must divide both")
