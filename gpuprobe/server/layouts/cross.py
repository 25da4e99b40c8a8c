"""Cross split: prefill and decode workers that share nothing but a TCP connection.

The decode worker listens on opts.cross_decode_addr (default 127.0.0.1 and a free port) and
the prefill worker sends each request's KV there (kv_transfer). On one host they still get
disjoint cores, like intra; on CUDA each would normally be its own GPU or machine, so each
gets the whole device here.
"""

from __future__ import annotations

from gpuprobe.server.kv_transfer import free_port
from gpuprobe.server.layouts import available_cores, base_spec, split_cores
from gpuprobe.server.options import LayoutConfig, ServeOptions
from gpuprobe.server.worker import WorkerSpec


def worker_specs(opts: ServeOptions, cfg: LayoutConfig, tag: str) -> list[WorkerSpec]:
    pre, dec = split_cores(available_cores(opts), cfg.prefill_share)
    addr = opts.cross_decode_addr or f"127.0.0.1:{free_port()}"
    return [
        base_spec(opts, cfg, f"{tag}-prefill", "prefill", pre, handoff="tcp", peer_addr=addr),
        base_spec(opts, cfg, f"{tag}-decode", "decode", dec, handoff="tcp", peer_addr=addr),
    ]
