"""Hopper-and-later GPU Performance Metrics (GPM): how busy the SMs really were.

NVML's utilization.gpu says whether *a* kernel ran; GPM says what share of SMs were busy
(sm_util_pct), how full they were with warps (sm_occupancy_pct), how much the tensor cores
worked (tensor_util_pct) and how much DRAM bandwidth was used (dram_bw_util_pct). Each metric
is computed between two GPM samples taken at least 100 ms apart: every collect() takes one
sample and compares it with the previous one, so the loop itself provides the spacing.
"""
from __future__ import annotations

from typing import Any

from gpuprobe.collectors.gpu import GpuInfo, Gpus
from gpuprobe.collectors.nvml import GpuLost

from gpuprobe.store import Sample

MIN_SPACING_S = 0.1  # NVML needs samples at least this far apart for meaningful metrics
METRICS = {  # our name -> pynvml constant
    "sm_util_pct": "NVML_GPM_METRIC_SM_UTIL",
    "sm_occupancy_pct": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "tensor_util_pct": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "dram_bw_util_pct": "NVML_GPM_METRIC_DRAM_BW_UTIL",
}


class GpmCollector:
    """GPM metrics per supporting GPU; GPUs without GPM (pre-Hopper) give no rows."""

    source = "gpm"

    def __init__(self, nvml: Any = None, host: str | None = None, gpus: Gpus | None = None):
        self.gpus = gpus or Gpus(nvml, host)
        self.host = self.gpus.host
        self._supported: dict[int, bool] = {}
        self._prev: dict[int, tuple[float, Any]] = {}  # gpu index -> (time, sample handle)
        self._spare: dict[int, Any] = {}

    def supported(self, gpu: GpuInfo) -> bool:
        if gpu.index not in self._supported:
            support = self.gpus.nv.call("nvmlGpmQueryDeviceSupport", gpu.handle)
            self._supported[gpu.index] = bool(getattr(support, "isSupportedDevice", 0))
        return self._supported[gpu.index]

    def collect(self, now_s: float) -> list[Sample]:
        rows: list[Sample] = []
        for gpu in list(self.gpus.live()):
            try:
                if not self.supported(gpu):
                    continue
                values = self._read(gpu, now_s)
            except GpuLost as exc:
                self._forget(gpu.index)
                self.gpus.lose(gpu, exc)
                continue
            rows += [Sample(now_s, self.host, self.source, gpu.device, m, v, gpu.labels)
                     for m, v in values.items()]
        return rows

    def _read(self, gpu: GpuInfo, now_s: float) -> dict[str, float | None]:
        nv = self.gpus.nv
        prev = self._prev.get(gpu.index)
        if prev is not None and now_s - prev[0] < MIN_SPACING_S:
            return {}
        sample = self._spare.pop(gpu.index, None) or nv.call("nvmlGpmSampleAlloc")
        if sample is None or nv.call("nvmlGpmSampleGet", gpu.handle, sample) is None:
            return {}
        self._prev[gpu.index] = (now_s, sample)
        if prev is None:
            return {}
        self._spare[gpu.index] = prev[1]  # reused next time: no alloc/free per tick
        return self._metrics(prev[1], sample)

    def _metrics(self, first: Any, second: Any) -> dict[str, float | None]:
        nv = self.gpus.nv
        request = nv.const("c_nvmlGpmMetricsGet_t")()
        request.version = nv.const("NVML_GPM_METRICS_GET_VERSION", 1)
        request.numMetrics = len(METRICS)
        request.sample1, request.sample2 = first, second
        for i, const in enumerate(METRICS.values()):
            request.metrics[i].metricId = nv.const(const)
        result = nv.call("nvmlGpmMetricsGet", request)
        if result is None:
            return dict.fromkeys(METRICS)
        ok = nv.const("NVML_SUCCESS", 0)
        return {name: (float(result.metrics[i].value) if result.metrics[i].nvmlReturn == ok else None)
                for i, name in enumerate(METRICS)}

    def _forget(self, index: int) -> None:
        for store in (self._prev, self._spare):
            item = store.pop(index, None)
            handle = item[1] if isinstance(item, tuple) else item
            if handle is not None:
                try:
                    self.gpus.nv.call("nvmlGpmSampleFree", handle)
                except GpuLost:
                    pass

    def close(self) -> None:
        for index in list(self._prev) + list(self._spare):
            self._forget(index)

    def drain_events(self) -> list[dict]:
        return self.gpus.drain_events()
