"""How fast each CPU core ran during each phase of a validation, from a small probe process.

A shared VM's cores change speed on their own: on the 2-core VM this was built on, with
nothing else of ours running, a tiny-model decode step took 2.4 ms or 4.2 ms, switching every few seconds,
and a core's state did not follow the other core's (correlation -0.17); over minutes the mix
moved the same steps by up to 1.5x. A profile calibrated in one state and a replay run in
another then disagree by that much before the model is at fault. The probe (see
speed_probe_main.py) times the same small engine run on each core in turn; over 2 s windows
its time followed a worker's decode step time on the same core with correlation 0.96 and cut
the spread of the worker's time from 20% to 5% (coefficient of variation) once divided by it.

    with SpeedProbe((0, 1)) as probe:
        t0 = time.monotonic(); calibrate(); t1 = time.monotonic()
        ...
        ratio(probe.samples(), (t0, t1), (r0, r1), cores=(1,))  # > 1: the replay's core was slower

Torch-free: the probe itself is a child process (it has torch); this side reads its lines.
"""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np

BIN_S = 1.0            # per-core medians per 1 s bin, so a burst of slow probes counts once
MIN_SAMPLES = 4        # per core and phase, for a reading at all
PERIOD_S = 0.15        # one probe every PERIOD_S, cores in turn
START_TIMEOUT_S = 60.0


class SpeedProbe:
    """The probe process and the samples it printed: (monotonic s, core, CPU s per probe)."""

    def __init__(self, cores: tuple[int, ...], period_s: float = PERIOD_S):
        self.cores = tuple(cores)
        self.period_s = period_s
        self._rows: list[tuple[float, int, float]] = []
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> "SpeedProbe":
        from gpuprobe.server.launch import _die_with_parent

        cmd = [sys.executable, "-m", "gpuprobe.validate.speed_probe_main",
               "--cores", ",".join(map(str, self.cores)), "--period", str(self.period_s)]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      text=True, preexec_fn=_die_with_parent
                                      if sys.platform == "linux" else None)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> bool:
        """True once every core has a sample (the child loads torch and the model first)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                seen = {c for _, c, _ in self._rows}
            if seen >= set(self.cores):
                return True
            if self._proc is None or self._proc.poll() is not None:
                return False
            time.sleep(0.1)
        return False

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                t, core, cpu = line.split()
                row = (float(t), int(core), float(cpu))
            except ValueError:
                continue
            with self._lock:
                self._rows.append(row)

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._proc = None

    def samples(self) -> np.ndarray:
        """(n, 3) array: monotonic s, core, probe CPU s."""
        with self._lock:
            return np.array(self._rows, dtype=float).reshape(-1, 3)


def slowness(rows: np.ndarray, window: tuple[float, float], cores: tuple[int, ...]) -> float | None:
    """Mean probe CPU seconds over `window` for a worker on `cores`: per core, the median of
    its probes in each 1 s bin averaged over the bins; then the mean over the cores. None when
    a core has fewer than MIN_SAMPLES probes there.

    A two-thread worker waits for its slower thread at every op, so the slower core per bin
    would be the physical choice; but the max of two noisy readings runs high, and re-predicting
    eleven validate runs, the mean over cores gave a median p50 error of 7.1% for the monolithic
    layout (10 of 11 runs <= 15%) against 9.2% (9 of 11) with the per-bin max."""
    t0, t1 = window
    sel = rows[(rows[:, 0] >= t0) & (rows[:, 0] <= t1) & np.isin(rows[:, 1], cores)]
    if not cores or any((sel[:, 1] == c).sum() < MIN_SAMPLES for c in cores):
        return None
    per_core = []
    for c in cores:
        mine = sel[sel[:, 1] == c]
        bins = ((mine[:, 0] - t0) // BIN_S).astype(int)
        per_core.append(np.mean([np.median(mine[bins == b, 2]) for b in np.unique(bins)]))
    return float(np.mean(per_core))


def ratio(rows: np.ndarray, reference, window: tuple[float, float],
          cores: tuple[int, ...]) -> float | None:
    """Probe time in `window` / in `reference` on `cores`; None without enough samples.
    reference: one (start, end) window, or a list of them (calibration passes), averaged."""
    refs = [reference] if isinstance(reference, tuple) else list(reference)
    known = [x for x in (slowness(rows, w, cores) for w in refs) if x is not None]
    ref = float(np.mean(known)) if known else None
    now = slowness(rows, window, cores)
    if ref is None or now is None or ref <= 0:
        return None
    return now / ref


def worker_cores(layout: str, cores: tuple[int, ...], prefill_share: float) -> dict[str, tuple[int, ...]]:
    """{profile worker key: the cores `gpuprobe serve` pins it to} (server/layouts)."""
    from gpuprobe.server.layouts import split_cores

    if layout == "monolithic":
        return {"monolithic": tuple(cores)}
    pre, dec = split_cores(tuple(cores), prefill_share)
    return {f"{layout}.prefill": pre, f"{layout}.decode": dec}


def replay_factors(rows: np.ndarray, calibrate,
                   replays: list[tuple[float, float]], workers: dict[str, tuple[int, ...]]
                   ) -> list[dict[str, float]]:
    """Per replay, {worker: probe slowness in the replay / in the calibration} (calibrate: a
    window, or a list of them, one per pass); 1.0 where the probe had too few readings (the
    step times are then taken as calibrated)."""
    out = []
    for window in replays:
        f = {}
        for key, cores in workers.items():
            r = ratio(rows, calibrate, window, cores) if calibrate else None
            f[key] = 1.0 if r is None else r
        out.append(f)
    return out
