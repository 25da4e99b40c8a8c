"""Disjoint SM partitions of one CUDA GPU for the intra layout, through CUDA green contexts.

The prefill and decode workers are separate processes. Each asks the driver for the same split
of the device's SMs (one group of the prefill count, and what remains): the split is
deterministic, so the prefill worker runs on the group and the decode worker on the remainder,
and the two never share an SM. torch's own GreenContext.create(num_sms) would hand both
processes the same first N SMs.

Green contexts of two processes run side by side only under an MPS daemon; without one the
driver time-slices the processes. On an H200 (bench/green_probe.py, docs/benchmarks.md) each
side kept 0.75x its solo matmul rate while the other ran under MPS, and 0.45x without.

Uses the driver API through cuda.bindings (CUDA 12.4+ driver); the caller falls back when it is
missing. The contexts and streams made here are kept for the life of the process: a green
context that is garbage-collected takes its stream with it.
"""

from __future__ import annotations

import os

SM_GRANULARITY = 8  # green contexts split SMs in groups of 8 on Hopper
_KEEP: list = []  # green contexts and streams in use; never released before exit


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:  # cuda-python before 12.6 named the module cuda.cuda
        from cuda import cuda as driver
    return driver


def _ok(ret):
    """Unwrap a cuda.bindings (err, value...) tuple, raising on an error code."""
    drv = _driver()
    err, *vals = ret
    if err != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver: {err!r}")
    return vals[0] if len(vals) == 1 else tuple(vals)


def prefill_sm_count(total_sms: int, prefill_share: float) -> int:
    """SMs for prefill: prefill_share of the device, rounded down to the granularity, leaving at
    least one group to decode."""
    g = SM_GRANULARITY
    n = int(total_sms * prefill_share) // g * g
    return max(g, min(n, (total_sms - g) // g * g))


def split(prefill_share: float, device_id: int = 0) -> dict:
    """{'prefill': resource, 'decode': resource, 'total': n, 'prefill_sms': n, 'decode_sms': n}."""
    drv = _driver()
    _ok(drv.cuInit(0))
    dev = _ok(drv.cuDeviceGet(device_id))
    whole = _ok(drv.cuDeviceGetDevResource(dev, drv.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM))
    total = whole.sm.smCount
    groups, n_groups, rest = _ok(drv.cuDevSmResourceSplitByCount(
        1, whole, 0, prefill_sm_count(total, prefill_share)))
    if n_groups != 1:
        raise RuntimeError(f"SM split gave {n_groups} groups, wanted 1")
    return {"prefill": groups[0], "decode": rest, "total": total,
            "prefill_sms": groups[0].sm.smCount, "decode_sms": rest.sm.smCount, "device": dev}


def stream_on(resource, device, device_id: int = 0):
    """A torch ExternalStream whose kernels run only on `resource`'s SMs."""
    import torch

    drv = _driver()
    desc = _ok(drv.cuDevResourceGenerateDesc([resource], 1))
    ctx = _ok(drv.cuGreenCtxCreate(desc, device,
                                   drv.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM))
    stream = _ok(drv.cuGreenCtxStreamCreate(ctx, drv.CUstream_flags.CU_STREAM_NON_BLOCKING, 0))
    _KEEP.append((desc, ctx, stream))
    return torch.cuda.ExternalStream(int(stream), device=device_id)


def mps_running() -> bool:
    """Whether an MPS control daemon answers at the pipe directory CUDA clients would use."""
    pipe_dir = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    return os.path.exists(os.path.join(pipe_dir, "control"))


def enter_partition(role: str, prefill_share: float) -> str:
    """Make this process's current CUDA stream run on its role's SMs; returns what was done.

    role: 'prefill' takes the split-off group, 'decode' the remainder.
    """
    import torch

    torch.cuda.init()
    torch.empty(1, device="cuda")  # the primary context must exist before green contexts
    parts = split(prefill_share)
    torch.cuda.set_stream(stream_on(parts[role], parts["device"]))
    shared = "" if mps_running() else "; no MPS daemon: time-sliced with the other worker"
    return (f"green context {parts[role + '_sms']}/{parts['total']} SMs "
            f"({role} side of a disjoint split{shared})")
