"""fake_nvml: a stand-in for the pynvml module at the hardware edge, for machines without a GPU.

    fake = FakeNvml(num_gpus=2, gpm=True)
    GpuCollector(nvml=fake)                 # injected, never patched into sys.modules

It has pynvml's names (functions, constants, error classes) and returns pynvml's real ctypes
structures where pynvml does (field values, GPM requests, process utilization), so the code under
test decodes exactly what it would decode from a driver. Options cover the awkward cases: no
driver, GPM not supported (pre-Hopper), fields answering NotSupported, and a GPU lost mid-run.
"""
from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pynvml


class FakeNvml:
    def __init__(self, num_gpus: int = 2, gpm: bool = True, no_driver: bool = False,
                 not_supported: tuple[str, ...] = (), lose_gpu: dict[int, int] | None = None,
                 processes: dict[int, list[tuple[int, int]]] | None = None):
        """`not_supported`: function names (or "power_instant", "nvlink") that answer NotSupported.
        `lose_gpu`: {index: n} - that GPU is lost after n utilization reads.
        `processes`: {index: [(pid, used_bytes), ...]}."""
        self.num_gpus, self.gpm, self.no_driver = num_gpus, gpm, no_driver
        self.not_supported = set(not_supported)
        self.lose_gpu = dict(lose_gpu or {})
        self.processes = processes or {}
        self.num_util_reads = [0] * num_gpus
        self.num_inits = 0
        self._gpm_samples: dict[int, int] = {}  # address of a sample -> GPU index
        self._nvlink_kib = [0] * num_gpus

    def __getattr__(self, name: str):
        # Constants, error classes and structures come from the real pynvml.
        if name.startswith(("NVML", "c_nvml", "NVMLError")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # --- helpers -----------------------------------------------------------------------------
    def expected(self, index: int) -> dict[str, float]:
        """What the fake reports for GPU `index` (units as the collectors store them)."""
        return {"nvml_gpu_busy_pct": 50.0 + index, "nvml_mem_busy_pct": 20.0 + index,
                "mem_used_bytes": (10 + index) * 2**30, "mem_total_bytes": 80 * 2**30,
                "sm_clock_mhz": 1980.0, "mem_clock_mhz": 2619.0, "power_w": 350.5 + index,
                "temperature_c": 60.0 + index, "pcie_tx_bytes_per_s": 1000.0 * 1024,
                "pcie_rx_bytes_per_s": 2000.0 * 1024, "sm_util_pct": 70.0 + index,
                "sm_occupancy_pct": 40.0 + index, "tensor_util_pct": 30.0 + index,
                "dram_bw_util_pct": 55.0 + index}

    def _check(self, fn: str, handle=None) -> None:
        if fn in self.not_supported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if handle is not None and handle.index in self.lose_gpu \
                and self.num_util_reads[handle.index] >= self.lose_gpu[handle.index]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    # --- session ------------------------------------------------------------------------------
    def nvmlInit(self):
        if self.no_driver:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.num_inits += 1

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return self.num_gpus

    def nvmlDeviceGetHandleByIndex(self, i):
        return SimpleNamespace(index=i)

    # --- readings -----------------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, h):
        self._check("nvmlDeviceGetUUID", h)
        return f"GPU-fake-{h.index:04d}"

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H100 80GB HBM3 (fake)"

    def nvmlDeviceGetUtilizationRates(self, h):
        self._check("nvmlDeviceGetUtilizationRates", h)
        self.num_util_reads[h.index] += 1
        e = self.expected(h.index)
        return SimpleNamespace(gpu=int(e["nvml_gpu_busy_pct"]), memory=int(e["nvml_mem_busy_pct"]))

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        self._check("nvmlDeviceGetMemoryInfo", h)
        e = self.expected(h.index)
        return SimpleNamespace(used=e["mem_used_bytes"], total=e["mem_total_bytes"],
                               free=e["mem_total_bytes"] - e["mem_used_bytes"])

    def nvmlDeviceGetClockInfo(self, h, kind):
        self._check("nvmlDeviceGetClockInfo", h)
        return 1980 if kind == pynvml.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, h, sensor):
        self._check("nvmlDeviceGetTemperature", h)
        return 60 + h.index

    def nvmlDeviceGetPowerUsage(self, h):
        self._check("nvmlDeviceGetPowerUsage", h)
        return int((350.0 + h.index) * 1000)  # the 1 s average: 0.5 W below the instant value

    def nvmlDeviceGetPcieThroughput(self, h, counter):
        self._check("nvmlDeviceGetPcieThroughput", h)
        return 1000 if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else 2000  # KB/s

    def nvmlDeviceGetFieldValues(self, h, field_ids):
        self._check("nvmlDeviceGetFieldValues", h)
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for v, fid in zip(values, field_ids):
            fid = fid[0] if isinstance(fid, tuple) else fid
            v.fieldId = fid
            if fid == pynvml.NVML_FI_DEV_POWER_INSTANT and "power_instant" not in self.not_supported:
                v.valueType, v.value.uiVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, int((350.5 + h.index) * 1000)
            elif fid in (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX) \
                    and "nvlink" not in self.not_supported:
                self._nvlink_kib[h.index] += 1024
                v.valueType, v.value.ullVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, self._nvlink_kib[h.index]
            else:
                v.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self._check("nvmlDeviceGetComputeRunningProcesses", h)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.processes.get(h.index, [])]

    def nvmlDeviceGetProcessUtilization(self, h, since_us):
        self._check("nvmlDeviceGetProcessUtilization", h)
        procs = self.processes.get(h.index, [])
        if not procs:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)  # what the driver says: no samples
        out = (pynvml.c_nvmlProcessUtilizationSample_t * len(procs))()
        for s, (pid, _) in zip(out, procs):
            s.pid, s.timeStamp, s.smUtil, s.memUtil = pid, since_us + 1000, 25, 10
        return list(out)

    # --- GPM ----------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, h):
        self._check("nvmlGpmQueryDeviceSupport", h)
        support = pynvml.c_nvmlGpmSupport_t()
        support.isSupportedDevice = 1 if self.gpm else 0
        return support

    def nvmlGpmSampleAlloc(self):
        return ctypes.pointer(pynvml.struct_c_nvmlGpmSample_t())

    def nvmlGpmSampleFree(self, sample):
        self._gpm_samples.pop(ctypes.addressof(sample.contents), None)

    def nvmlGpmSampleGet(self, h, sample):
        self._check("nvmlGpmSampleGet", h)
        if not self.gpm:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._gpm_samples[ctypes.addressof(sample.contents)] = h.index
        return sample

    def nvmlGpmMetricsGet(self, request):
        index = self._gpm_samples[ctypes.addressof(request.sample2.contents)]
        e = self.expected(index)
        names = {pynvml.NVML_GPM_METRIC_SM_UTIL: "sm_util_pct", pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy_pct",
                 pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor_util_pct",
                 pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram_bw_util_pct"}
        for i in range(request.numMetrics):
            m = request.metrics[i]
            m.value, m.nvmlReturn = e[names[m.metricId]], pynvml.NVML_SUCCESS
        return request
