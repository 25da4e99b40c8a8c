"""timeline.macro_ends rebuilds the step ends a macro-step's loop added up, bit for bit.

The engine keeps only each macro-step's start clock, batch and KV positions; macro_ends must
give the very floats the engine loop computed, on both of its paths (few chains of
back-to-back macro-steps, or many), and with a step overhead and scale (the loop's general
formula) as well as without (its plain one)."""
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from test_sim_equivalence import CASES, _profile, _trace

from gpuprobe.sim import engine as sim_engine
from gpuprobe.sim.timeline import macro_ends
from gpuprobe.sim.simulator import simulate


def _loop(t0_s, ctx, seqs, length, chained, coefs) -> list[float]:
    """The engine's loop, one step at a time. A chained macro-step starts where the one
    before ended: its t0_s is set to that, as the engine records it."""
    d0, d1, d2, ovh, scale = coefs
    out, t = [], 0.0
    for m, (t0, C, B, K) in enumerate(zip(t0_s.tolist(), ctx.tolist(), seqs.tolist(),
                                          length.tolist())):
        if chained[m]:
            t0_s[m] = t
        t = t0_s[m]
        x = d0 + d1 * B
        for c in range(C, C + K * B, B):
            t += (x + d2 * c + ovh) * scale
            out.append(t)
    return out


@pytest.mark.parametrize("coefs", [(5e-3, 3e-5, 3.4e-8, 0.0, 1.0),
                                   (5e-3, 3e-5, 3.4e-8, 1.3e-4, 1.37)])
@pytest.mark.parametrize("num_chains", [3, 400])  # the chained path, then the by-length one
def test_macro_ends_equal_the_loop_bit_for_bit(coefs, num_chains):
    rng = np.random.default_rng(num_chains)
    n = 800
    length = rng.integers(1, 60, n)
    length[5] = 700  # a long one among short ones
    seqs = rng.integers(1, 40, n)
    ctx = rng.integers(1, 50_000, n)
    t0 = np.sort(rng.uniform(0, 3600, n))
    starts = np.r_[0, np.sort(rng.choice(np.arange(1, n), num_chains - 1, replace=False))]
    chained = np.ones(n, dtype=bool)
    chained[starts] = False
    want = _loop(t0, ctx, seqs, length, chained, coefs)
    got = macro_ends(t0, ctx, seqs, length, starts, coefs)
    assert got.tolist() == want  # exact, not approximately


def test_macro_ends_of_nothing_is_empty():
    z = np.zeros(0, dtype=np.int64)
    assert len(macro_ends(np.zeros(0), z, z, z, z, (1.0, 0.0, 0.0, 0.0, 1.0))) == 0


@pytest.mark.parametrize("layout", ["monolithic", "cross"])
def test_overhead_and_scale_keep_macro_steps_exact(layout, monkeypatch):
    # The engine's general step formula (a step overhead and a scale) against single steps.

    prof = _profile()
    workers = {k: replace(w, step_overhead_s=1.3e-4, scale=1.37)
               for k, w in prof.workers.items()}
    prof = replace(prof, workers=workers)
    fast = simulate(_trace(), prof, layout, config=CASES["prefill_first"])
    monkeypatch.setattr(sim_engine, "MIN_MACRO_STEPS", 10 ** 9)
    slow = simulate(_trace(), prof, layout, config=CASES["prefill_first"])
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    assert fast.summary["tbt_p99_s"] == slow.summary["tbt_p99_s"]
