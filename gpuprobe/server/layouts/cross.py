"""Cross split: prefill and decode workers that share nothing but an authenticated TCP link.

Local (the front starts them): num_prefill prefill and num_decode decode workers on this host,
the prefill ones on the prefill share of the cores, the decode ones on the rest; each decode
worker listens on opts.cross_decode_addr's host (default 127.0.0.1) and a port of its own (the
address itself when there is one decode worker), under a secret made for this layout. On CUDA
each would normally be its own GPU or machine, so each gets the whole device here.

Remote: the workers `gpuprobe worker` runs, wherever, given to the front by address
(RemoteSpec); the first num_prefill and num_decode of them.

Either way the front picks each request's prefill and decode worker (router.py) and tells the
prefill worker where to send the KV.
"""

from __future__ import annotations

from gpuprobe.server.layouts import available_cores, base_spec, split_cores
from gpuprobe.server.link_auth import new_local_config
from gpuprobe.server.options import LayoutConfig, ServeOptions
from gpuprobe.server.remote_handle import RemoteSpec


def worker_specs(opts: ServeOptions, cfg: LayoutConfig, tag: str) -> list:
    if cfg.remote:
        return remote_specs(opts, cfg)
    pre, dec = split_cores(available_cores(opts), cfg.prefill_share)
    link = new_local_config()
    host, _, _ = (opts.cross_decode_addr or "127.0.0.1:0").rpartition(":")
    listen = [opts.cross_decode_addr if cfg.num_decode == 1 and opts.cross_decode_addr
              else f"{host}:0" for _ in range(cfg.num_decode)]
    return ([base_spec(opts, cfg, _name(tag, "prefill", i, cfg.num_prefill), "prefill", pre,
                       handoff="tcp", link=link) for i in range(cfg.num_prefill)]
            + [base_spec(opts, cfg, _name(tag, "decode", i, cfg.num_decode), "decode", dec,
                         handoff="tcp", link=link, listen_addr=addr)
               for i, addr in enumerate(listen)])


def _name(tag: str, role: str, i: int, n: int) -> str:
    return f"{tag}-{role}" if n == 1 else f"{tag}-{role}{i + 1}"


def remote_specs(opts: ServeOptions, cfg: LayoutConfig) -> list[RemoteSpec]:
    """The remote workers of cfg; ValueError when the front was given fewer."""
    for role, given, want in (("prefill", opts.prefill_workers, cfg.num_prefill),
                              ("decode", opts.decode_workers, cfg.num_decode)):
        if want > len(given):
            raise ValueError(f"num_{role} {want}: the front was given {len(given)} {role} "
                             f"worker(s) (--{role}-workers)")
    return ([RemoteSpec(f"prefill@{a}", "prefill", a) for a in
             opts.prefill_workers[:cfg.num_prefill]]
            + [RemoteSpec(f"decode@{a}", "decode", a) for a in
               opts.decode_workers[:cfg.num_decode]])
