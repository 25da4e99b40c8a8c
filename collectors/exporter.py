"""The agent's own /metrics: the latest reading of every series, Prometheus-style.

Built on a per-agent CollectorRegistry (nothing registers globally at import). Names and their
nearest DCGM exporter equivalents (docs/architecture.md has the full table):

    gpuprobe_gpu_sm_util_pct          ~ DCGM_FI_PROF_SM_ACTIVE (x100)
    gpuprobe_gpu_sm_occupancy_pct     ~ DCGM_FI_PROF_SM_OCCUPANCY (x100)
    gpuprobe_gpu_tensor_util_pct      ~ DCGM_FI_PROF_PIPE_TENSOR_ACTIVE (x100)
    gpuprobe_gpu_dram_bw_util_pct     ~ DCGM_FI_PROF_DRAM_ACTIVE (x100)
    gpuprobe_gpu_nvml_gpu_busy_pct    ~ DCGM_FI_DEV_GPU_UTIL
    gpuprobe_gpu_nvml_mem_busy_pct    ~ DCGM_FI_DEV_MEM_COPY_UTIL
    gpuprobe_gpu_mem_used_bytes       ~ DCGM_FI_DEV_FB_USED (MiB there)
    gpuprobe_gpu_power_w              ~ DCGM_FI_DEV_POWER_USAGE_INSTANT
    gpuprobe_gpu_temperature_c        ~ DCGM_FI_DEV_GPU_TEMP
    gpuprobe_gpu_sm_clock_mhz         ~ DCGM_FI_DEV_SM_CLOCK
    gpuprobe_gpu_pcie_tx_bytes_per_s  ~ DCGM_FI_PROF_PCIE_TX_BYTES
    gpuprobe_gpu_nvlink_tx_bytes_per_s ~ DCGM_FI_PROF_NVLINK_TX_BYTES

GPU series carry labels gpu, uuid, hostname; host series device, hostname; engine series
target, engine, model, hostname.
"""
from __future__ import annotations

import re
from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gpuprobe.store import Sample, label_dict

_PREFIX = {"nvml": "gpu", "gpm": "gpu", "gpu_proc": "gpu", "host": "host", "engine": "engine"}


class LatestValues:
    """Keeps the newest value per series, fed with every batch the samplers produce."""

    def __init__(self):
        self.values: dict[tuple[str, str, str, str], tuple[str, float]] = {}

    def update(self, rows: Iterable[Sample]) -> None:
        for r in rows:
            if r.value is not None:
                self.values[(r.source, r.device, r.metric, r.labels)] = (r.host, r.value)


class AgentCollector:
    """prometheus_client collector over LatestValues plus the agent's own counters."""

    def __init__(self, latest: LatestValues, counters: Callable[[], dict[str, float]]):
        self.latest = latest
        self.counters = counters

    def collect(self):
        families: dict[str, GaugeMetricFamily] = {}
        for (source, device, metric, labels), (host, value) in list(self.latest.values.items()):
            prefix = _PREFIX.get(source, source)
            name = "gpuprobe_" + re.sub(r"[^a-zA-Z0-9_]", "_", f"{prefix}_{metric}")
            extra = label_dict(labels)
            if source in ("nvml", "gpm"):
                keys, vals = ["gpu", "uuid", "hostname"], [device.removeprefix("gpu"), extra.get("uuid", ""), host]
            elif source == "gpu_proc":
                keys, vals = ["gpu", "uuid", "pid", "hostname"], [device.removeprefix("gpu"), extra.get("uuid", ""),
                                                                  extra.get("pid", ""), host]
            elif prefix == "engine":
                keys, vals = ["target", "engine", "model", "hostname"], [device, extra.get("engine", ""),
                                                                         extra.get("model", ""), host]
            else:
                keys, vals = ["device", "pid", "hostname"], [device, extra.get("pid", ""), host]
            fam = families.get(name)
            if fam is None:
                fam = families[name] = GaugeMetricFamily(name, f"latest {metric} ({source})", labels=keys)
            fam.add_metric(vals, value)
        yield from families.values()
        for name, value in self.counters().items():
            if name.endswith("_total"):
                yield CounterMetricFamily(name.removesuffix("_total"), name, value=value)
            else:
                yield GaugeMetricFamily(name, name, value=value)


def serve(latest: LatestValues, counters: Callable[[], dict[str, float]], port: int, addr: str):
    """Start the /metrics HTTP server in a thread; returns (server, bound port)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(latest, counters))
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server, server.server_port
