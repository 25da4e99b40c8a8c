"""Intra split: a prefill worker and a decode worker on one machine with disjoint compute.

CPU: disjoint core sets by prefill_share. CUDA: each worker gets its share of the SMs
(runner_setup.partition_cuda). The KV moves through shared memory over a Pipe that the
front creates between the two (handoff='pipe'); chunked prefill does not apply to a
decode-only worker, so only the prefill worker honours chunked_prefill_tokens.
"""

from __future__ import annotations

from gpuprobe.server.layouts import available_cores, base_spec, split_cores
from gpuprobe.server.options import LayoutConfig, ServeOptions
from gpuprobe.server.worker import WorkerSpec


def worker_specs(opts: ServeOptions, cfg: LayoutConfig, tag: str) -> list[WorkerSpec]:
    pre, dec = split_cores(available_cores(opts), cfg.prefill_share)
    gpu = opts.device == "cuda"
    return [
        base_spec(opts, cfg, f"{tag}-prefill", "prefill", pre, handoff="pipe",
                  sm_share=cfg.prefill_share if gpu else None),
        base_spec(opts, cfg, f"{tag}-decode", "decode", dec, handoff="pipe",
                  sm_share=1 - cfg.prefill_share if gpu else None),
    ]
