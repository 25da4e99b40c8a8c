"""How much CPU other tenants of this machine use while we measure (Linux /proc).

On a small shared machine another process stretches the server's steps (a worker with two
torch threads on two busy cores straggles 10-100x), so a latency measured while the machine
was busy says more about the neighbour than about the layout. validate measures the foreign
load of each phase, waits for a quiet machine before one (bounded), and repeats a phase that
was disturbed, so the numbers it compares are of the layout under test.

    watch = CpuWatch()            # everything outside this process tree is foreign
    ... measure ...
    watch.foreign_cores()         # mean cores used by other processes since the start

foreign cores = (non-idle CPU time of the machine - CPU time of our process tree) / wall time.
Where /proc is missing the readings are None and nothing waits.
"""
from __future__ import annotations

import os
import time

from gpuprobe.errors import GpuprobeError

QUIET_CORES = 0.2     # foreign load below which the machine counts as quiet
# user nice system irq softirq steal (not idle, iowait). Niced work counts too: a background
# `make install` at nice 19 / SCHED_IDLE beside a validate run doubled its prefill sweeps'
# times and left a prefill fit at R^2 0.03 (docs/model-log.md), though a niced busy loop
# alone costs a torch worker nothing; validate cannot tell one kind of niced job from the other.
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def machine_busy_s() -> float | None:
    """Non-idle CPU seconds of the whole machine since boot (all cores summed)."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()[1:]
    except OSError:
        return None
    return sum(int(fields[i]) for i in _BUSY_FIELDS) / os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(name))
    return kids


def tree_cpu_s(root: int) -> float | None:
    """CPU seconds of `root` and its live descendants, plus their reaped children."""
    kids, total, todo = _children(), 0.0, [root]
    tick = os.sysconf("SC_CLK_TCK")
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/stat") as fh:
                f = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            if pid == root:
                return None
            continue
        total += sum(int(x) for x in f[11:15]) / tick  # utime stime cutime cstime
        todo += kids.get(pid, [])
    return total


class CpuWatch:
    """Foreign CPU load (cores) since construction or the last restart()."""

    def __init__(self, root: int | None = None):
        self.root = root or os.getpid()
        self.restart()

    def restart(self) -> None:
        self.t0, self.busy0, self.own0 = time.monotonic(), machine_busy_s(), tree_cpu_s(self.root)

    def foreign_cores(self) -> float | None:
        busy, own = machine_busy_s(), tree_cpu_s(self.root)
        wall = time.monotonic() - self.t0
        if None in (busy, own, self.busy0, self.own0) or wall <= 0:
            return None
        return max(0.0, ((busy - self.busy0) - (own - self.own0)) / wall)


def wait_quiet(max_wait_s: float, window_s: float = 1.0, quiet: float = QUIET_CORES,
               say=lambda m: None) -> float | None:
    """Wait (at most max_wait_s) until a window_s window has under `quiet` foreign cores.

    Returns the last window's foreign load (cores), None where it cannot be measured.
    """
    deadline = time.monotonic() + max_wait_s
    told = False
    while True:
        w = CpuWatch()
        time.sleep(window_s)
        load = w.foreign_cores()
        if load is None or load < quiet or time.monotonic() >= deadline:
            return load
        if not told:
            say(f"machine busy ({load:.2f} cores used by other processes); waiting for it to "
                f"quiet down (at most {max_wait_s:.0f} s)")
            told = True


class BudgetSpent(GpuprobeError):
    """No phase may start: the run's time budget is spent (validate turns it into its line)."""


class PhaseGuard:
    """Runs measurement phases on a quiet machine, within a time budget.

    guard(phase, fn): wait for quiet (at most max_wait_s), run fn, and when other processes
    used `quiet` cores or more meanwhile, run it once more if the budget allows. Returns the
    foreign load (cores) of the run that was kept. The phase about to run and the
    `phases_left` after it are kept in reserve, each at the mean length of the phases run so
    far (`phase_s` before the first), so waits and repeats spend only what the deadline
    leaves over.
    """

    def __init__(self, deadline: float, phases_left: int, phase_s: float = 30.0,
                 max_wait_s: float = 30.0, quiet: float = QUIET_CORES, say=lambda m: None,
                 hard_deadline: float | None = None):
        self.deadline, self.phases_left, self.phase_s = deadline, phases_left, phase_s
        self.max_wait_s, self.quiet, self.say = max_wait_s, quiet, say
        self.hard_deadline = hard_deadline  # no phase starts past it (the run's budget)
        self.took: list[float] = []  # seconds each run of a phase took
        self.planned_phase_s: float | None = None  # the plan's mean phase (replan)

    def replan(self, deadline: float, phases_left: int, phase_s: float | None = None) -> None:
        """A new deadline for the phases, how many are left and their planned mean length
        (validate's plan); no phase starts once it could not end by the deadline. The
        reserve per phase is then at least the plan's: the phases run so far (one long
        calibration pass and short replays) may say less than what is left."""
        self.deadline, self.phases_left = deadline, phases_left
        self.planned_phase_s = phase_s
        if self.hard_deadline is not None:
            self.hard_deadline = min(self.hard_deadline, deadline)

    def _per_phase_s(self) -> float:
        """The mean length of the phases run so far (`phase_s` before the first): validate's
        phases range from a 13 s calibration pass to a 31 s replay, so a floor at the longest
        would reserve more than the budget holds and leave no room for a wait or a repeat."""
        mean = sum(self.took) / len(self.took) if self.took else self.phase_s
        return max(mean, self.planned_phase_s or 0.0)

    def spare_s(self) -> float:
        """Seconds the budget holds beyond the next phase and the phases left after it."""
        return self._spare_s(self._per_phase_s())

    def skip(self) -> None:
        """One of the phases counted in phases_left will not run."""
        self.phases_left = max(0, self.phases_left - 1)

    def _spare_s(self, next_s: float) -> float:
        """Seconds left over once a run of next_s and the phases left are kept in reserve."""
        return self.deadline - time.monotonic() - next_s - self.phases_left * self._per_phase_s()

    def __call__(self, phase: str, fn) -> float | None:
        if self.hard_deadline is not None and \
                time.monotonic() + 0.5 * self._per_phase_s() > self.hard_deadline:
            raise BudgetSpent(f"stopped before {phase}: the time budget is spent (the machine "
                              f"ran slower than planned); raise --budget or pass fewer "
                              f"--layouts")
        self.phases_left = max(0, self.phases_left - 1)
        load, next_s = None, self._per_phase_s()
        for attempt in (1, 2):
            if self._spare_s(next_s) > 0:
                wait_quiet(min(self.max_wait_s, self._spare_s(next_s)), quiet=self.quiet,
                           say=self.say)
            watch, t0 = CpuWatch(), time.monotonic()
            fn()
            load, next_s = watch.foreign_cores(), time.monotonic() - t0
            self.took.append(next_s)
            if load is None or load < self.quiet:
                return load
            if attempt == 2 or self._spare_s(next_s) < 5:
                break
            self.say(f"{phase}: disturbed ({load:.2f} cores used by other processes); repeating it")
        self.say(f"{phase}: the machine was busy ({load:.2f} cores used by other processes); "
                 "result kept but flagged")
        return load


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) of process `pid` alone, not its children."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
