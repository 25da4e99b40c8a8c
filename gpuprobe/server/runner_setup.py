"""Inside a worker: pin compute (CPU cores, or a CUDA SM partition), load the model, size the KV
cache from a megabyte budget. Imports torch; only worker processes import this module.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("gpuprobe.server")
_KEEP: list = []  # a fallback green context; released only at exit (it owns the stream)


def partition_cuda(role: str, sm_share: float) -> str:
    """Restrict this process to its side of a disjoint split of the GPU's SMs; returns what was
    done, for the layout's status.

    1. green_partition (the driver's green contexts through cuda.bindings): disjoint sides.
    2. torch.cuda.green_contexts (beta): sm_share of the SMs, but both workers get the same
       first SMs, so the sides overlap; said so in the result.
    3. The MPS percentage set before CUDA initialised (effective only when an MPS daemon runs).
    """
    import torch

    from gpuprobe.server import green_partition

    prefill_share = sm_share if role == "prefill" else 1.0 - sm_share
    try:
        what = green_partition.enter_partition(role, round(prefill_share, 6))
        if not green_partition.mps_running():
            log.warning("%s worker: no MPS daemon runs, so the two intra workers are time-sliced "
                        "on the GPU, not side by side; start `nvidia-cuda-mps-control -d` "
                        "before gpuprobe serve", role)
        return what
    except Exception as exc:  # noqa: BLE001 - no cuda.bindings, old driver, MIG: try the next
        log.warning("disjoint green contexts unavailable (%s)", exc)
    total = torch.cuda.get_device_properties(0).multi_processor_count
    n = green_partition.prefill_sm_count(total, sm_share)
    green = getattr(getattr(torch.cuda, "green_contexts", None), "GreenContext", None)
    if green is None:
        return f"mps {os.environ.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE')}%"
    try:
        ctx = green.create(num_sms=n)
    except Exception as exc:  # noqa: BLE001 - driver too old, MIG, ...: fall back to the whole GPU
        log.warning("green context of %d SMs failed (%s); using the whole GPU", n, exc)
        return "none"
    _KEEP.append(ctx)
    if hasattr(ctx, "Stream"):
        torch.cuda.set_stream(ctx.Stream())
    else:
        ctx.set_context()
    return f"green context {n}/{total} SMs (torch; overlaps the other worker's)"


def build_runner(spec) -> tuple[object, dict]:
    """(ModelRunner, info dict for the front) for a WorkerSpec."""
    from gpuprobe.server.worker import pin_cpu

    if spec.device == "cuda" and spec.sm_share is not None:
        # Read by the CUDA driver at context creation, so set before torch touches CUDA.
        os.environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, round(100 * spec.sm_share)))
    threads = pin_cpu(spec.cores)
    import torch

    from gpuprobe.llama.runner import ModelRunner, blocks_for_budget, load_model

    torch.set_num_threads(threads)
    partition = "cpu cores " + ",".join(map(str, spec.cores))
    if spec.device == "cuda":
        partition = ("whole GPU" if spec.sm_share is None
                     else partition_cuda(spec.role, spec.sm_share))
    dtype = torch.bfloat16 if spec.device == "cuda" else torch.float32
    config, model, tokenizer = load_model(spec.model, spec.device, dtype, **spec.model_overrides)
    num_blocks = blocks_for_budget(config, spec.kv_cache_mb << 20, spec.block_size, dtype)
    runner = ModelRunner(config, num_blocks, spec.block_size, spec.device, threads, dtype, model)
    eos = getattr(tokenizer, "eos_token_id", None)
    return runner, {"num_blocks": num_blocks, "eos_token_id": config.eos_token_id
                    if config.eos_token_id is not None else eos, "threads": threads,
                    "partition": partition, "param_bytes": runner.param_bytes,
                    "kv_bytes_per_token": runner.kv_bytes_per_token}
