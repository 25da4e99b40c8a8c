"""Host readings through psutil (the one module that imports it): CPU, memory, network, disk
and the serving processes, as Sample rows with source "host".

    host = HostCollector(pattern=r"vllm|gpuprobe serve")   # or pids=[1234]
    rows = host.collect(time.time())

Devices and metrics: "cpu<i>" and "cpu" cpu_util_pct; "mem" mem_used_bytes, mem_total_bytes;
"net:<nic>" net_tx_bytes_per_s, net_rx_bytes_per_s; "disk" disk_read_bytes_per_s,
disk_write_bytes_per_s; "proc" proc_cpu_pct (100 = one core), proc_rss_bytes with labels
"pid=<pid>;name=<name>". Rates need two readings, so the first collect() gives none.
"""
from __future__ import annotations

import importlib
import os
import re
import socket
from typing import Any

from gpuprobe.store import Sample

RESCAN_S = 10.0  # how often a --process-pattern is matched again against the process table


class HostCollector:
    source = "host"

    def __init__(self, psutil: Any = None, host: str | None = None, pids: list[int] | tuple = (),
                 pattern: str | None = None):
        self.ps = psutil or importlib.import_module("psutil")
        self.host = host or socket.gethostname()
        self.pids = list(pids)
        self.pattern = re.compile(pattern) if pattern else None
        self._procs: dict[int, Any] = {}
        self._scanned_s = -1e18
        self._prev: dict[str, tuple[float, float]] = {}  # counter key -> (time, value)
        self.ps.cpu_percent(percpu=True)  # primes the CPU counters: the next call is a real share

    def collect(self, now_s: float) -> list[Sample]:
        rows: list[Sample] = []

        def add(device: str, metric: str, value: float | None, labels: str = "") -> None:
            rows.append(Sample(now_s, self.host, self.source, device, metric, value, labels))

        per_cpu = self.ps.cpu_percent(percpu=True)
        for i, pct in enumerate(per_cpu):
            add(f"cpu{i}", "cpu_util_pct", float(pct))
        if per_cpu:
            add("cpu", "cpu_util_pct", sum(per_cpu) / len(per_cpu))
        mem = self.ps.virtual_memory()
        add("mem", "mem_used_bytes", float(mem.total - mem.available))
        add("mem", "mem_total_bytes", float(mem.total))
        for nic, c in (self.ps.net_io_counters(pernic=True) or {}).items():
            if nic != "lo":
                self._rate(add, now_s, f"net:{nic}", "net_tx_bytes_per_s", c.bytes_sent)
                self._rate(add, now_s, f"net:{nic}", "net_rx_bytes_per_s", c.bytes_recv)
        disk = self.ps.disk_io_counters(perdisk=False)
        if disk is not None:
            self._rate(add, now_s, "disk", "disk_read_bytes_per_s", disk.read_bytes)
            self._rate(add, now_s, "disk", "disk_write_bytes_per_s", disk.write_bytes)
        self._processes(add, now_s)
        return rows

    def _rate(self, add, now_s: float, device: str, metric: str, total: float) -> None:
        key = f"{device}/{metric}"
        prev = self._prev.get(key)
        self._prev[key] = (now_s, float(total))
        if prev is not None and now_s > prev[0] and total >= prev[1]:
            add(device, metric, (total - prev[1]) / (now_s - prev[0]))

    def _processes(self, add, now_s: float) -> None:
        if self.pattern is not None and now_s - self._scanned_s >= RESCAN_S:
            self._scanned_s = now_s
            me = os.getpid()
            for p in self.ps.process_iter(["pid", "cmdline"]):
                cmd = " ".join(p.info.get("cmdline") or [])
                if p.info["pid"] != me and self.pattern.search(cmd) and p.info["pid"] not in self._procs:
                    self._track(p.info["pid"])
        for pid in self.pids:
            if pid not in self._procs:
                self._track(pid)
        for pid, proc in list(self._procs.items()):
            try:
                with proc.oneshot():
                    labels = f"pid={pid};name={proc.name()}"
                    add("proc", "proc_cpu_pct", float(proc.cpu_percent(None)), labels)
                    add("proc", "proc_rss_bytes", float(proc.memory_info().rss), labels)
            except (self.ps.NoSuchProcess, self.ps.AccessDenied, self.ps.ZombieProcess):
                del self._procs[pid]  # gone: a pattern may find its successor at the next rescan
                if pid in self.pids:
                    self.pids.remove(pid)

    def _track(self, pid: int) -> None:
        try:
            proc = self.ps.Process(pid)
            proc.cpu_percent(None)  # primes it
            self._procs[pid] = proc
        except (self.ps.NoSuchProcess, self.ps.AccessDenied):
            pass
