"""Host collector with the real psutil on this machine and real child processes."""
import os
import subprocess
import sys
import time

import pytest
from gpuprobe.collectors.host import HostCollector


def metric_rows(rows, metric):
    return [r for r in rows if r.metric == metric]


class RecordingPsutil:
    """The real psutil, passed through, keeping the disk counters each call returned, so a
    test knows what the collector read."""

    def __init__(self):
        import psutil
        self._ps, self.disk = psutil, []

    def __getattr__(self, name):
        return getattr(self._ps, name)

    def disk_io_counters(self, **kw):
        self.disk.append(self._ps.disk_io_counters(**kw))
        return self.disk[-1]


def test_cpu_memory_and_rates():
    import psutil

    ps = RecordingPsutil()
    host = HostCollector(psutil=ps, host="h1")
    t0 = time.time()
    first = host.collect(t0)
    assert not metric_rows(first, "disk_read_bytes_per_s")  # a rate needs two readings
    time.sleep(0.2)
    rows = host.collect(t0 + 0.25)  # the rate is over the times collect() is given
    per_cpu = [r for r in metric_rows(rows, "cpu_util_pct") if r.device != "cpu"]
    assert len(per_cpu) == psutil.cpu_count()
    assert all(0.0 <= r.value <= 100.0 for r in per_cpu)
    total = metric_rows(rows, "mem_total_bytes")[0].value
    assert total == psutil.virtual_memory().total
    assert 0 < metric_rows(rows, "mem_used_bytes")[0].value <= total
    if ps.disk[-1] is not None:  # a machine without block devices has no disk counters
        before, after = ps.disk
        assert metric_rows(rows, "disk_write_bytes_per_s")[0].value == \
            pytest.approx((after.write_bytes - before.write_bytes) / 0.25)
        assert metric_rows(rows, "disk_read_bytes_per_s")[0].value == \
            pytest.approx((after.read_bytes - before.read_bytes) / 0.25)
    assert all(r.source == "host" and r.host == "h1" for r in rows)


def test_process_by_pid_reports_cpu_and_rss():
    host = HostCollector(pids=[os.getpid()])
    cpu0, wall0 = time.process_time(), time.monotonic()
    host.collect(time.time())
    while time.process_time() < cpu0 + 0.3:  # burn 0.3 s of CPU, however long a busy machine takes
        pass
    rows = host.collect(time.time())
    share = 100 * (time.process_time() - cpu0) / (time.monotonic() - wall0)  # what this process took
    rss = metric_rows(rows, "proc_rss_bytes")
    assert rss and rss[0].value > 10 * 2**20 and f"pid={os.getpid()}" in rss[0].labels
    assert metric_rows(rows, "proc_cpu_pct")[0].value == pytest.approx(share, rel=0.3)


@pytest.mark.timeout(30)
def test_process_by_pattern_and_its_exit():
    marker = f"gpuprobe-host-test-{os.getpid()}"
    child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(30)  # {marker}"])
    try:
        host = HostCollector(pattern=marker)
        rows = host.collect(time.time())
        labels = {r.labels for r in metric_rows(rows, "proc_rss_bytes")}
        assert labels == {f"pid={child.pid};name={os.path.basename(sys.executable)}"} or \
            any(f"pid={child.pid}" in lab for lab in labels)
        child.kill()
        child.wait(timeout=10)
        rows = host.collect(time.time())  # the process is gone: no rows, no error
        assert not any(f"pid={child.pid}" in r.labels for r in rows)
    finally:
        child.kill()
        child.wait(timeout=10)
