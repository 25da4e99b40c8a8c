"""The simulator's predictions, pinned bit for bit: what a refactoring of the engine or the
simulator must leave exactly as it was (tests/fixtures/sim_pinned.json).

The cases reach what tests/test_sim_equivalence.py does not: a measured-like profile's noise
(step, front-event and wake-up draws), arrival stalls and KV imports, padded decode attention,
cross xPyD, and predict() with host effects over several seeds. Regenerate only for an
intended change of results, and say why in the commit:
`.venv/bin/python tests/test_sim_pinned.py --regen`.
"""
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuprobe.engine.scheduler import SchedulerConfig
from gpuprobe.perf.contention import FrontCpu
from gpuprobe.perf.costmodel import Link, Overhead, Profile, simple_worker
from gpuprobe.perf.metrics import Slo
from gpuprobe.sim.predict import HostEffects, predict
from gpuprobe.sim.layouts import LayoutConfig
from gpuprobe.sim.simulator import simulate

PINNED = Path(__file__).parent / "fixtures" / "sim_pinned.json"
SLO = Slo(2.0, 0.2)
_Q = np.linspace(-0.2, 0.3, 100)
SMALL = LayoutConfig(  # a small KV cache and batch: preemptions
    mixed=SchedulerConfig(num_blocks=600, max_num_seqs=16),
    prefill=SchedulerConfig(role="prefill", num_blocks=600),
    decode=SchedulerConfig(role="decode", num_blocks=600, max_num_seqs=16))
CHUNKED = LayoutConfig(
    mixed=SchedulerConfig(num_blocks=500, max_num_seqs=32, chunked_prefill_tokens=96),
    prefill=SchedulerConfig(role="prefill", num_blocks=600, chunked_prefill_tokens=128),
    decode=SchedulerConfig(role="decode", num_blocks=500, max_num_seqs=32,
                           chunked_prefill_tokens=24))


def _profile(attention: str, noisy: bool) -> Profile:
    kw = {}
    if noisy:
        kw = dict(prefill_noise=tuple(1 + _Q * 0.5), decode_noise=tuple(1 + _Q * 0.3),
                  arrival_stall_s=0.001, arrival_stall_per_token_s=1e-6,
                  wake=((0.03, 0.002), (0.3, 0.01)), wake_spread=tuple(_Q * 0.01))
    w = simple_worker(0.01, 1e-4, 1e-8, 0.005, 1e-3, 1e-6, decode_attention=attention, **kw)
    wd = replace(w, import_s=0.001, import_per_token_s=1e-6,
                 decode_event_noise=tuple(1 + _Q) if noisy else ())
    return Profile(workers={"monolithic": w, "intra.prefill": w, "intra.decode": wd,
                            "cross.prefill": w, "cross.decode": wd},
                   links={"intra": Link(0.0, 1e12), "cross": Link(0.002, 1e9)},
                   overhead=Overhead(request_in_s=0.003, token_out_s=0.001),
                   kv_bytes_per_token=1000)


def _trace(n: int = 250, seed: int = 11, prompt_scale: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"arrival_s": np.cumsum(rng.exponential(0.04, n)),
                         "prompt_tokens": rng.integers(1, 700, n) * prompt_scale,
                         "output_tokens": rng.integers(1, 160, n)})


def _simulated(attention, noisy, config, layout, seed=0) -> dict:
    return simulate(_trace(), _profile(attention, noisy), layout, SLO, config, seed).summary


CASES = {
    **{f"noisy-chunked-padded/{x}": (lambda x=x: _simulated("padded", True, CHUNKED, x, 1))
       for x in ("monolithic", "intra", "cross")},
    **{f"small-paged/{x}": (lambda x=x: _simulated("paged", False, SMALL, x))
       for x in ("monolithic", "intra", "cross")},
    "small-padded/intra": lambda: _simulated("padded", False, SMALL, "intra"),
    "2P3D-paged/cross": lambda: _simulated(
        "paged", False, replace(SMALL, num_prefill=2, num_decode=3), "cross"),
    "3P1D-noisy-chunked/cross": lambda: _simulated(
        "paged", True, replace(CHUNKED, num_prefill=3, num_decode=1), "cross", 2),
    **{f"predict-host-effects/{x}": (lambda x=x: predict(
        _trace(120, 5, 3), _profile("paged", True), x, SLO, CHUNKED, seeds=3,
        host_effects=HostEffects(front_cpu={x: FrontCpu(0.002, 1e-4, "m", 1e-6)},
                                 speed_drift={x: [{}, {"monolithic": 1.1, f"{x}.decode": 1.2}]})))
       for x in ("monolithic", "cross")},
}


def _figures(summary: dict) -> dict:
    """The summary's numbers (the nested confidence and lists aside), NaN as None."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v)
            for k, v in sorted(summary.items())
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


@pytest.fixture(scope="module")
def pinned() -> dict:
    return json.loads(PINNED.read_text())


@pytest.mark.parametrize("case", CASES)
def test_predictions_are_exactly_the_pinned_ones(case, pinned):
    got, want = _figures(CASES[case]()), pinned[case]
    assert got.keys() == want.keys()
    # == on floats read back from their repr: bit for bit
    assert {k: v for k, v in got.items() if v != want[k]} == {}, case


if __name__ == "__main__":
    if sys.argv[1:] != ["--regen"]:
        sys.exit("usage: test_sim_pinned.py --regen")
    PINNED.write_text(json.dumps({k: _figures(f()) for k, f in CASES.items()}, indent=0) + "\n")
