"""Where the demo's minutes go: each stage's wall time and the CPU time it used, against the
time plan printed at the start.

CPU seconds are those of the demo and of every process under it (the reference server, the
agent, validate's servers, kaleido's browser): on a machine busy with other work the wall
time stretches, the CPU time much less, so CPU / 2 cores tells what a stage needs on an idle
2-core machine (the replay's wall is set by its arrival times instead).
"""
from __future__ import annotations

import resource
import time


def cpu_s() -> float:
    """CPU seconds used so far by this process and its descendants: the live ones (each with
    the children it has reaped) read through psutil, the ended ones from the kernel's totals
    of the children this process reaped."""
    import psutil

    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    for proc in psutil.Process().children(recursive=True):
        try:
            t = proc.cpu_times()
        except psutil.Error:  # ended between the listing and the reading
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


class Clock:
    """Times the demo's stages: `with clock.stage(key):` around each; `table()` at the end."""

    def __init__(self, plan: dict[str, float]):
        self.plan = plan  # stage key -> seconds it is expected to take on an idle 2-core machine
        self.rows: list[tuple[str, float, float]] = []  # (key, wall s, CPU s)

    def stage(self, key: str):
        return _Timed(self, key)

    def plan_lines(self) -> list[str]:
        parts = ", ".join(f"{k} {v:.0f} s" for k, v in self.plan.items())
        return [f"time plan on an idle 2-core machine (about {sum(self.plan.values()) / 60:.1f} min): {parts}"]

    def table(self) -> list[str]:
        out = [f"  {'stage':<10} {'plan s':>7} {'wall s':>7} {'CPU s':>7}"]
        for key, wall, cpu in self.rows:
            planned = self.plan.get(key)
            out.append(f"  {key:<10} {'' if planned is None else f'{planned:.0f}':>7} {wall:>7.1f} {cpu:>7.1f}")
        walls, cpus = sum(r[1] for r in self.rows), sum(r[2] for r in self.rows)
        out.append(f"  {'total':<10} {sum(self.plan.values()):>7.0f} {walls:>7.1f} {cpus:>7.1f}")
        out.append("  (CPU s: the demo and every process under it; on a busy machine wall time "
                   "stretches, CPU time much less)")
        return out


class _Timed:
    def __init__(self, clock: Clock, key: str):
        self.clock, self.key = clock, key

    def __enter__(self):
        self.t0, self.c0 = time.perf_counter(), cpu_s()
        return self

    def __exit__(self, *exc):
        self.clock.rows.append((self.key, time.perf_counter() - self.t0, cpu_s() - self.c0))
        return False
