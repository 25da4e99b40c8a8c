"""Monolithic: one mixed-role worker prefills and decodes, with every core (or the whole GPU)."""

from __future__ import annotations

from gpuprobe.server.layouts import available_cores, base_spec
from gpuprobe.server.options import LayoutConfig, ServeOptions
from gpuprobe.server.worker import WorkerSpec


def worker_specs(opts: ServeOptions, cfg: LayoutConfig, tag: str) -> list[WorkerSpec]:
    return [base_spec(opts, cfg, f"{tag}-mixed", "mixed", available_cores(opts))]
