"""Per-process GPU memory and SM use (source "gpu_proc"), read at a slower rate than the GPU.

Rows: device "gpu<index>", labels "pid=<pid>;uuid=<gpu uuid>", metrics proc_mem_used_bytes,
proc_sm_util_pct and proc_mem_busy_pct (the last two averaged by the driver since the previous
read).
"""
from __future__ import annotations

from typing import Any

from gpuprobe.collectors.gpu import GpuInfo, Gpus
from gpuprobe.collectors.nvml import GpuLost

from gpuprobe.store import Sample


class GpuProcessCollector:
    source = "gpu_proc"

    def __init__(self, nvml: Any = None, host: str | None = None, gpus: Gpus | None = None):
        self.gpus = gpus or Gpus(nvml, host)
        self.host = self.gpus.host
        self._last_us: dict[int, int] = {}  # per GPU: newest utilization sample seen (microseconds)

    def collect(self, now_s: float) -> list[Sample]:
        rows: list[Sample] = []
        for gpu in list(self.gpus.live()):
            try:
                rows += self._read(gpu, now_s)
            except GpuLost as exc:
                self.gpus.lose(gpu, exc)
        return rows

    def _read(self, gpu: GpuInfo, now_s: float) -> list[Sample]:
        nv, rows = self.gpus.nv, []

        def row(pid: int, metric: str, value: Any) -> Sample:
            return Sample(now_s, self.host, self.source, gpu.device, metric,
                          None if value is None else float(value), f"pid={pid};uuid={gpu.uuid}")

        for proc in nv.call("nvmlDeviceGetComputeRunningProcesses", gpu.handle) or []:
            rows.append(row(proc.pid, "proc_mem_used_bytes", getattr(proc, "usedGpuMemory", None)))
        since = self._last_us.get(gpu.index, 0)
        for s in nv.call("nvmlDeviceGetProcessUtilization", gpu.handle, since) or []:
            self._last_us[gpu.index] = max(self._last_us.get(gpu.index, 0), int(s.timeStamp))
            rows += [row(s.pid, "proc_sm_util_pct", s.smUtil), row(s.pid, "proc_mem_busy_pct", s.memUtil)]
        return rows

    def drain_events(self) -> list[dict]:
        return self.gpus.drain_events()
