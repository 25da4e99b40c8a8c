"""GPU collectors over the fake NVML (tests/fake_nvml.py) and the real pynvml on this machine."""
import subprocess
import sys

import pytest
from fake_nvml import FakeNvml
from gpuprobe.collectors.gpm import GpmCollector
from gpuprobe.collectors.gpu import GpuCollector
from gpuprobe.collectors.gpu_procs import GpuProcessCollector
from gpuprobe.collectors.nvml import NO_DRIVER, Nvml

from gpuprobe.store import Store


def by_key(rows):
    return {(r.device, r.metric): r for r in rows}


def test_readings_per_gpu_with_identity_and_units():
    fake = FakeNvml(num_gpus=2)
    rows = by_key(GpuCollector(nvml=fake, host="h1").collect(100.0))
    for i in range(2):
        exp = fake.expected(i)
        for metric in ("nvml_gpu_busy_pct", "nvml_mem_busy_pct", "mem_used_bytes", "mem_total_bytes",
                       "sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c",
                       "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s"):
            row = rows[(f"gpu{i}", metric)]
            assert row.value == pytest.approx(exp[metric]), metric
            assert row.source == "nvml" and row.host == "h1" and f"uuid=GPU-fake-{i:04d}" in row.labels


def test_power_prefers_instant_field_then_average_then_none():
    assert by_key(GpuCollector(nvml=FakeNvml(1)).collect(1.0))[("gpu0", "power_w")].value == 350.5
    fallback = GpuCollector(nvml=FakeNvml(1, not_supported=("power_instant",))).collect(1.0)
    assert by_key(fallback)[("gpu0", "power_w")].value == 350.0
    neither = GpuCollector(nvml=FakeNvml(1, not_supported=("power_instant", "nvmlDeviceGetPowerUsage"))).collect(1.0)
    assert by_key(neither)[("gpu0", "power_w")].value is None


def test_not_supported_fields_are_none_not_errors():
    rows = by_key(GpuCollector(nvml=FakeNvml(1, not_supported=("nvmlDeviceGetTemperature",
                                                                 "nvmlDeviceGetPcieThroughput"))).collect(1.0))
    assert rows[("gpu0", "temperature_c")].value is None
    assert rows[("gpu0", "pcie_tx_bytes_per_s")].value is None
    assert rows[("gpu0", "nvml_gpu_busy_pct")].value == 50.0


def test_nvlink_rate_from_cumulative_counters():
    gpu = GpuCollector(nvml=FakeNvml(1))
    assert ("gpu0", "nvlink_tx_bytes_per_s") not in by_key(gpu.collect(10.0))
    later = by_key(gpu.collect(12.0))
    assert later[("gpu0", "nvlink_tx_bytes_per_s")].value > 0


def test_gpm_metrics_between_two_samples():
    fake = FakeNvml(2, gpm=True)
    gpm = GpmCollector(nvml=fake)
    assert gpm.collect(10.0) == []  # one sample: nothing to compare yet
    assert gpm.collect(10.05) == []  # under 100 ms apart: skipped
    rows = by_key(gpm.collect(11.0))
    for i in range(2):
        for metric in ("sm_util_pct", "sm_occupancy_pct", "tensor_util_pct", "dram_bw_util_pct"):
            assert rows[(f"gpu{i}", metric)].value == fake.expected(i)[metric]
            assert rows[(f"gpu{i}", metric)].source == "gpm"
    gpm.close()


def test_gpm_unsupported_gives_no_rows():
    gpm = GpmCollector(nvml=FakeNvml(1, gpm=False))
    assert gpm.collect(1.0) == [] and gpm.collect(2.0) == []


def test_gpu_lost_mid_run_is_an_event_and_others_go_on(tmp_path):
    gpu = GpuCollector(nvml=FakeNvml(2, lose_gpu={1: 2}), host="h1")
    gpm = GpmCollector(gpus=gpu.gpus)
    devices = []
    for t in range(5):
        rows = gpu.collect(float(t)) + gpm.collect(float(t))
        devices.append({r.device for r in rows})
    assert devices[0] == {"gpu0", "gpu1"} and devices[-1] == {"gpu0"}
    events = gpu.drain_events()
    assert [e["kind"] for e in events] == ["gpu_lost"] and events[0]["device"] == "gpu1"
    with Store.open(tmp_path / "s.db") as store:
        store.insert_events(events)
        assert store.events()["kind"].tolist() == ["gpu_lost"]


def test_process_readings():
    fake = FakeNvml(1, processes={0: [(4242, 3 * 2**30)]})
    rows = by_key(GpuProcessCollector(nvml=fake).collect(5.0))
    assert rows[("gpu0", "proc_mem_used_bytes")].value == 3 * 2**30
    assert rows[("gpu0", "proc_sm_util_pct")].value == 25.0
    assert "pid=4242" in rows[("gpu0", "proc_sm_util_pct")].labels
    assert GpuProcessCollector(nvml=FakeNvml(1)).collect(5.0) == []  # no processes: NotFound -> none


def test_no_driver_is_a_clear_state():
    gpu = GpuCollector(nvml=FakeNvml(no_driver=True))
    assert gpu.off_reason.startswith(NO_DRIVER)
    assert gpu.collect(1.0) == []


def test_real_pynvml_on_this_machine_starts_or_says_why():
    nv = Nvml()
    if nv.start():
        pytest.skip("this machine has an NVIDIA driver")
    assert nv.off_reason.startswith(NO_DRIVER)
    assert nv.handles() == []


def test_importing_collectors_does_not_load_pynvml_or_psutil():
    code = ("import sys, gpuprobe, gpuprobe.collectors.gpu, gpuprobe.collectors.agent;"
            "print('pynvml' in sys.modules, 'psutil' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr
