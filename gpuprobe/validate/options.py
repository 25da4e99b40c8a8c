"""ValidateOptions: every setting of one validate run, frozen; what the CLI builds from its flags
and the run, its plan, its predictions and `repredict` read."""
from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.perf.metrics import Slo


@dataclass(frozen=True)
class ValidateOptions:
    model: str = "tiny"
    layouts: tuple[str, ...] = ("monolithic", "intra", "cross")
    load: float | None = None  # of the simulated capacity (None: sizing.DEFAULT_LOAD); replay_rate.py
    load_basis: str = "peak"   # the busiest stretch's rate over capacity, or the mean's
    max_idle_s: float | None = 1.0  # peak basis: idle gaps of the replay cut to this
    rate_rps: float | None = None
    limit: int = 300
    token_scale: float = 0.1
    slo: Slo = Slo(ttft_s=0.5, tpot_s=0.05)
    prefill_share: float = 0.5
    device: str = "cpu"       # the server's --device (cpu | cuda)
    server_opts: tuple = ()   # extra start_server keyword pairs
    calibration: tuple = ()   # run_calibration keyword pairs (smaller sweeps for tests)
    replays: int = 3               # per layout; measured metrics are medians over them
    sim_seeds: int = 9             # simulator noise seeds per replay; predictions are medians
    budget_s: float = 600.0        # the whole run, every phase (plan.py)
    quiet_wait_s: float = 30.0     # longest wait for other processes to quiet down, per phase
    speed_probe: bool = True       # CPU device: correct for the cores' own speed drift
    host_effects: bool = True      # predict with the host effects measured (sim/predict.py)
    interleave: bool = False       # a calibration pass after every replay, all passes pooled
