"""Per-GPU NVML readings as Sample rows (source "nvml", device "gpu<index>").

    gpus = GpuCollector(nvml=None)          # None: the real pynvml; tests pass tests/fake_nvml
    rows = gpus.collect(time.time())        # [] when there is no driver (see gpus.off_reason)

Metric names carry units. `nvml_gpu_busy_pct` is NVML's utilization.gpu: the share of time in
which *a kernel was running*, not how many SMs were busy (that is GPM's sm_util_pct), so a GPU
running one tiny kernel back to back reads 100 here.
"""
from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Any

from gpuprobe.collectors.nvml import GpuLost, Nvml, text

from gpuprobe.store import Sample


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    handle: Any

    @property
    def device(self) -> str:
        return f"gpu{self.index}"

    @property
    def labels(self) -> str:
        return f"uuid={self.uuid};name={self.name}"


class Gpus:
    """The visible GPUs, found once; a lost GPU is dropped and reported as an event dict."""

    def __init__(self, nvml: Any = None, host: str | None = None):
        self.nv = nvml if isinstance(nvml, Nvml) else Nvml(nvml)
        self.host = host or socket.gethostname()
        self._gpus: list[GpuInfo] | None = None
        self.events: list[dict] = []  # rows for store.insert_events, drained by the agent

    @property
    def off_reason(self) -> str | None:
        self.nv.start()
        return self.nv.off_reason

    def live(self) -> list[GpuInfo]:
        if self._gpus is None:
            self._gpus = []
            for i, h in enumerate(self.nv.handles()):
                try:
                    uuid = text(self.nv.call("nvmlDeviceGetUUID", h))
                    name = text(self.nv.call("nvmlDeviceGetName", h))
                except GpuLost as exc:
                    self.lose(GpuInfo(i, "", "", h), exc)
                    continue
                self._gpus.append(GpuInfo(i, uuid, name, h))
        return self._gpus

    def lose(self, gpu: GpuInfo, exc: Exception) -> None:
        """Stop reading `gpu` and queue an event saying why; the other GPUs go on."""
        if self._gpus is not None and gpu in self._gpus:
            self._gpus.remove(gpu)
        self.events.append({"ts_s": time.time(), "host": self.host, "source": "nvml",
                            "device": gpu.device, "kind": "gpu_lost",
                            "message": f"{gpu.device} ({gpu.uuid}) lost: {exc}"})

    def drain_events(self) -> list[dict]:
        out, self.events = self.events, []
        return out


class GpuCollector:
    """Utilization, memory, clocks, power, temperature, PCIe and NVLink per GPU."""

    source = "nvml"

    def __init__(self, nvml: Any = None, host: str | None = None, gpus: Gpus | None = None):
        self.gpus = gpus or Gpus(nvml, host)
        self.host = self.gpus.host
        self._nvlink_prev: dict[int, tuple[float, float, float]] = {}

    @property
    def off_reason(self) -> str | None:
        return self.gpus.off_reason

    def collect(self, now_s: float) -> list[Sample]:
        rows: list[Sample] = []
        for gpu in list(self.gpus.live()):
            try:
                values = self._read(gpu, now_s)
            except GpuLost as exc:
                self.gpus.lose(gpu, exc)
                continue
            rows += [Sample(now_s, self.host, self.source, gpu.device, m, v, gpu.labels)
                     for m, v in values.items()]
        return rows

    def drain_events(self) -> list[dict]:
        return self.gpus.drain_events()

    def _read(self, gpu: GpuInfo, now_s: float) -> dict[str, float | None]:
        nv, h = self.gpus.nv, gpu.handle
        util = nv.call("nvmlDeviceGetUtilizationRates", h)
        mem = nv.call("nvmlDeviceGetMemoryInfo", h)
        out = {
            "nvml_gpu_busy_pct": _num(getattr(util, "gpu", None)),
            "nvml_mem_busy_pct": _num(getattr(util, "memory", None)),
            "mem_used_bytes": _num(getattr(mem, "used", None)),
            "mem_total_bytes": _num(getattr(mem, "total", None)),
            "sm_clock_mhz": _num(nv.call("nvmlDeviceGetClockInfo", h, nv.const("NVML_CLOCK_SM", 1))),
            "mem_clock_mhz": _num(nv.call("nvmlDeviceGetClockInfo", h, nv.const("NVML_CLOCK_MEM", 2))),
            "power_w": self._power_w(h),
            "temperature_c": _num(nv.call("nvmlDeviceGetTemperature", h, nv.const("NVML_TEMPERATURE_GPU", 0))),
        }
        for direction, const in (("tx", "NVML_PCIE_UTIL_TX_BYTES"), ("rx", "NVML_PCIE_UTIL_RX_BYTES")):
            kib_per_s = _num(nv.call("nvmlDeviceGetPcieThroughput", h, nv.const(const)))
            out[f"pcie_{direction}_bytes_per_s"] = None if kib_per_s is None else kib_per_s * 1024.0
        out.update(self._nvlink(gpu, now_s))
        return out

    def _power_w(self, h: Any) -> float | None:
        # The instantaneous field follows load steps; nvmlDeviceGetPowerUsage is a 1 s average
        # on recent GPUs, so it is only the fallback.
        field = self.gpus.nv.const("NVML_FI_DEV_POWER_INSTANT")
        milliwatts = self.gpus.nv.field_values(h, [field])[0] if field is not None else None
        if milliwatts is None:
            milliwatts = _num(self.gpus.nv.call("nvmlDeviceGetPowerUsage", h))
        return None if milliwatts is None else milliwatts / 1000.0

    def _nvlink(self, gpu: GpuInfo, now_s: float) -> dict[str, float | None]:
        # NVLink data counters are cumulative KiB (scope 0: the device total), so rates need
        # the previous reading; the first reading of a GPU gives no rate.
        nv = self.gpus.nv
        ids = [nv.const("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX"), nv.const("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX")]
        if None in ids:
            return {}
        tx, rx = nv.field_values(gpu.handle, [(i, 0) for i in ids])
        if tx is None or rx is None:
            return {"nvlink_tx_bytes_per_s": None, "nvlink_rx_bytes_per_s": None}
        prev = self._nvlink_prev.get(gpu.index)
        self._nvlink_prev[gpu.index] = (now_s, tx, rx)
        if prev is None or now_s <= prev[0] or tx < prev[1] or rx < prev[2]:
            return {}
        dt = now_s - prev[0]
        return {"nvlink_tx_bytes_per_s": (tx - prev[1]) * 1024.0 / dt,
                "nvlink_rx_bytes_per_s": (rx - prev[2]) * 1024.0 / dt}


def _num(value: Any) -> float | None:
    return None if value is None else float(value)
