"""What a worker's devices hold: the weights, the activations of its largest step, the
runtime's own buffers, and the KV cache in what is left of the memory the engine may use.

    budget      = device memory x gpu_memory_utilization   (vLLM's --gpu-memory-utilization:
                                                           the share of the whole device the
                                                           engine takes, weights included)
    weights     = params x dtype bytes / tp                (embedding and head split by vocab)
    activations = 2 B x max_num_batched_tokens x heads x head_dim x k(tp)
    reserved    = CUDA context, cuBLAS workspaces, graphs (3.5 GiB) + NCCL buffers (tp > 1)
    KV          = budget - weights - activations - reserved, per device
    KV tokens   = KV / (layers x 2 x KV heads per device x head_dim x dtype bytes)

k(tp) (11, 6.5, 5, 5 at TP 1, 2, 4, 8), the reserved 3.5 GiB and the NCCL buffers (342 MiB at
TP2, 392 MiB at TP4 and TP8) are AIConfigurator 0.12's figures for Llama-family models on
Hopper (its TRT-LLM/vLLM backends' activation table and system files), fitted there to
deployments. A worker whose weights, activations and buffers leave no room for one sequence
of the model's full context does not fit (vLLM refuses to start such an engine).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from gpuprobe.errors import UserError
from gpuprobe.perf.specs import GIB, GpuSpec, ModelShape

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default before 0.22 (0.92 since); SGLang's 0.88
MAX_NUM_BATCHED_TOKENS = 8192         # vLLM V1's step budget with chunked prefill: its profile run
RESERVED_BYTES = 3.5 * GIB
NCCL_BYTES = {1: 0.0, 2: 342 * (1 << 20), 4: 392 * (1 << 20), 8: 392 * (1 << 20)}
ACTIVATION_FACTOR = {1: 11.0, 2: 6.5, 4: 5.0, 8: 5.0}
TP_SIZES = (1, 2, 4, 8)
INTRA_SHARES = {"prefill": 1 / 3, "decode": 2 / 3}  # of the KV memory an intra pair leaves


@dataclass(frozen=True)
class MemoryFit:
    """One worker (a TP group of `tp` devices) of `model` on `gpu`. Bytes are per device;
    max_kv_tokens is the token positions the worker's KV cache holds (0 when it does not fit)."""

    model: str
    gpu: str
    tp: int
    gpu_memory_utilization: float
    device_bytes: float
    budget_bytes: float
    weights_bytes: float
    activation_bytes: float
    reserved_bytes: float
    kv_bytes: float
    kv_bytes_per_token: int
    max_kv_tokens: int
    min_kv_tokens: int             # one sequence of the model's full context
    instances: int = 1             # engines sharing the devices, each with its own weights
    kv_share: float = 1.0          # this one's share of the KV memory they leave

    @property
    def fits(self) -> bool:
        return self.max_kv_tokens >= max(self.min_kv_tokens, 1)

    def why(self) -> str:
        """The numbers, in one line (GiB, as the driver counts memory): why it fits or not."""
        used = self.instances * (self.weights_bytes + self.activation_bytes + self.reserved_bytes)
        head = (f"{self.model} on {self.gpu} at TP{self.tp}: weights {_gib(self.weights_bytes)}"
                f" + activations {_gib(self.activation_bytes)} + runtime "
                f"{_gib(self.reserved_bytes)} per device"
                + (f", x{self.instances} engines" if self.instances > 1 else ""))
        budget = (f"{_gib(self.device_bytes, 0)} x {self.gpu_memory_utilization:g} = "
                  f"{_gib(self.budget_bytes)}")
        if used >= self.budget_bytes:
            return f"{head} = {_gib(used)}, more than {budget}"
        share = "" if self.kv_share == 1 else f", {self.kv_share:.0%} of it this engine's"
        tail = (f"leave {_gib(self.budget_bytes - used)} of {budget} for KV{share}: "
                f"{self.max_kv_tokens:,} tokens")
        if not self.fits:
            tail += f", fewer than one {self.min_kv_tokens:,}-token sequence"
        return f"{head} {tail}"

    def to_dict(self) -> dict:
        return {**asdict(self), "fits": self.fits}


def _gib(num_bytes: float, digits: int = 1) -> str:
    return f"{num_bytes / GIB:.{digits}f} GiB"


def memory_fit(shape: ModelShape, spec: GpuSpec, tp: int = 1,
               gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
               max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS,
               device_bytes: float | None = None) -> MemoryFit:
    """Whether `shape` fits a worker of `tp` devices of `spec`, and the KV tokens it holds.
    device_bytes: the device's memory where another source knows it better (silicon data)."""
    if not 0 < gpu_memory_utilization <= 1:
        raise UserError(f"--gpu-memory-utilization must be in (0, 1], got {gpu_memory_utilization}")
    device = float(device_bytes or spec.mem_bytes)
    budget = device * gpu_memory_utilization
    weights = shape.weights_bytes(tp)
    factor = ACTIVATION_FACTOR.get(min(tp, 8), ACTIVATION_FACTOR[8])
    activations = 2.0 * max_num_batched_tokens * shape.n_heads * shape.head_dim * factor
    reserved = RESERVED_BYTES + NCCL_BYTES.get(min(tp, 8), NCCL_BYTES[8])
    kv = budget - weights - activations - reserved
    per_token = shape.kv_bytes_per_token_per_device(tp)
    tokens = int(kv // per_token) if kv > 0 and per_token > 0 else 0
    return MemoryFit(model=shape.name, gpu=spec.name, tp=tp,
                     gpu_memory_utilization=gpu_memory_utilization, device_bytes=device,
                     budget_bytes=budget, weights_bytes=weights, activation_bytes=activations,
                     reserved_bytes=reserved, kv_bytes=kv, kv_bytes_per_token=per_token,
                     max_kv_tokens=tokens, min_kv_tokens=shape.max_seq_len)


def worker_memory(shape: ModelShape, specs: dict[str, GpuSpec], tps: dict[str, int],
                  gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
                  device_bytes: dict[str, float] | None = None) -> dict[str, MemoryFit]:
    """{worker key: MemoryFit} for a profile's five workers. specs / tps / device_bytes by
    'monolithic', 'cross.prefill', 'cross.decode' (intra shares the monolithic device). The
    two intra engines each hold the weights; the KV memory they leave goes a third to prefill
    (it keeps a prompt's KV only until decode has read it), two thirds to decode."""
    dev = device_bytes or {}
    out = {key: memory_fit(shape, specs[key], tps[key], gpu_memory_utilization,
                           device_bytes=dev.get(key))
           for key in ("monolithic", "cross.prefill", "cross.decode")}
    for role, part in INTRA_SHARES.items():
        out[f"intra.{role}"] = _intra(out["monolithic"], part)
    return out


def _intra(mono: MemoryFit, part: float) -> MemoryFit:
    """One of the two intra engines on `mono`'s devices: both hold the weights, activations and
    runtime; this one gets `part` of the KV memory left. It needs room for a sequence, not a
    full context (the plan can lower the engines' max model length)."""
    left = mono.kv_bytes - (mono.weights_bytes + mono.activation_bytes + mono.reserved_bytes)
    kv = left * part
    tokens = int(kv // mono.kv_bytes_per_token) if kv > 0 else 0
    return replace(mono, kv_bytes=kv, max_kv_tokens=tokens, min_kv_tokens=1, instances=2,
                   kv_share=part)


def smallest_tp(shape: ModelShape, spec: GpuSpec,
                gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
                device_bytes: float | None = None) -> int | None:
    """The smallest TP size in TP_SIZES at which `shape` fits `spec`; None if none does."""
    for tp in TP_SIZES:
        if shape.n_heads % tp == 0 and memory_fit(shape, spec, tp, gpu_memory_utilization,
                                                  device_bytes=device_bytes).fits:
            return tp
    return None


def with_memory(workers: dict, fits: dict[str, MemoryFit], shape: ModelShape,
                specs: dict[str, GpuSpec], refuse: bool = True) -> dict:
    """The workers (StepCost by key) with the KV tokens their memory holds. The monolithic and
    cross workers must fit (a UserError with the numbers and the smallest TP that fits) unless
    not `refuse`; an intra pair, or with refuse=False any worker, that does not fit keeps 0
    tokens and says why (the layout cannot run there)."""
    out = dict(workers)
    for key, fit in fits.items():
        if key not in out:
            continue
        if (key.startswith("intra.") or not refuse) and not fit.fits:
            out[key] = replace(out[key], max_kv_tokens=0,
                               reasons=out[key].reasons + (f"{key} does not fit: {fit.why()}",))
            continue
        if not fit.fits:
            tp = smallest_tp(shape, specs[key], fit.gpu_memory_utilization)
            flag = "--tp" if key == "monolithic" else f"--{key.split('.')[1]}-tp"
            hint = (f"{flag} {tp} is the smallest TP size that fits" if tp else
                    f"no TP size up to {TP_SIZES[-1]} fits")
            require_fit(fit, hint)
        out[key] = replace(out[key], max_kv_tokens=fit.max_kv_tokens)
    return out


def require_fit(fit: MemoryFit, hint: str = "") -> MemoryFit:
    """`fit` itself, or a UserError with its numbers (and `hint`) when it does not fit."""
    if not fit.fits:
        raise UserError(f"does not fit: {fit.why()}{'; ' + hint if hint else ''}")
    return fit
