"""BudgetWatch: no phase of a validate run goes past its --budget."""
from __future__ import annotations

import contextlib
import time

from gpuprobe.errors import GpuprobeError


class BudgetWatch:
    """No phase runs past the budget: at the deadline, the server of the phase in progress is
    stopped, its requests fail, and the run stops with one line saying so (a calibration
    pass on a machine loaded ten times over can take longer than the whole budget)."""

    def __init__(self, deadline: float, budget_s: float, say=lambda m: None):
        import threading

        self.budget_s, self.say, self.expired, self.probe = budget_s, say, False, None
        self.timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._expire)
        self.timer.daemon = True

    def _expire(self) -> None:
        self.expired = True
        probe = self.probe
        if probe is not None and probe.handle is not None:
            self.say(f"{probe.layout}: the {self.budget_s:.0f} s budget is spent; stopping")
            probe.handle.stop(timeout_s=5.0)

    @contextlib.contextmanager
    def running(self, probe):
        """`probe` entered, the one to stop when the budget runs out."""
        with probe:
            self.probe = probe
            try:
                yield probe
            finally:
                self.probe = None

    def __enter__(self) -> "BudgetWatch":
        self.timer.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.timer.cancel()
        if self.expired and exc_type is not None and issubclass(exc_type, Exception):
            raise GpuprobeError(
                f"stopped: the --budget of {self.budget_s:.0f} s ran out before the "
                f"measurements ended (the phases took longer than planned, or the first "
                f"calibration pass alone took the budget: see the foreign-load lines above); "
                f"raise --budget, pass fewer --layouts or a smaller --limit, or run on a "
                f"quieter machine") from exc
