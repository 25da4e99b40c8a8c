"""Layouts as lists of WorkerSpecs: which workers run, with which role, cores and handoff."""

from __future__ import annotations

import os

from gpuprobe.server.options import LayoutConfig, ServeOptions
from gpuprobe.server.worker import WorkerSpec


def available_cores(opts: ServeOptions) -> tuple[int, ...]:
    if opts.cores:
        return tuple(opts.cores)
    if hasattr(os, "sched_getaffinity"):
        return tuple(sorted(os.sched_getaffinity(0)))
    return tuple(range(os.cpu_count() or 1))


def split_cores(cores: tuple[int, ...], share: float) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Disjoint (prefill, decode) core sets, round(share * n) for prefill, at least 1 each.

    With a single core both sets are that core: the split is then only nominal.
    """
    if len(cores) < 2:
        return cores, cores
    n = min(len(cores) - 1, max(1, round(share * len(cores))))
    return cores[:n], cores[n:]


def base_spec(opts: ServeOptions, cfg: LayoutConfig, worker_id: str, role: str,
              cores: tuple[int, ...], **kw) -> WorkerSpec:
    return WorkerSpec(
        worker_id=worker_id, role=role, model=opts.model, device=opts.device, cores=cores,
        max_num_seqs=opts.max_num_seqs, max_num_batched_tokens=opts.max_num_batched_tokens,
        chunked_prefill_tokens=cfg.chunked_prefill_tokens, kv_cache_mb=opts.kv_cache_mb,
        block_size=opts.block_size, model_overrides=dict(opts.model_overrides), **kw)


def worker_specs(opts: ServeOptions, cfg: LayoutConfig, tag: str) -> list[WorkerSpec]:
    """The workers of layout `cfg`; tag makes worker ids unique across switches."""
    from gpuprobe.server.layouts import cross, intra, monolithic

    module = {"monolithic": monolithic, "intra": intra, "cross": cross}[cfg.layout]
    return module.worker_specs(opts, cfg, tag)
