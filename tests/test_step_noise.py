"""Step-time noise: measured from repeated steps of one shape, drawn by a seeded simulator."""
import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from gpuprobe.perf.costmodel import Overhead, Profile, simple_worker
from gpuprobe.perf.profile import load_profile
from gpuprobe.perf.noise_fit import step_noise
from gpuprobe.perf.profile_fit import fit_worker
from gpuprobe.sim.simulator import simulate
from gpuprobe.errors import UserError


def _noisy_steps(sigma: float, seed: int = 0) -> pd.DataFrame:
    """Calibration-like steps: prefill sizes twice each, decode bursts of 24 steps, every
    duration the curve times a lognormal factor of spread sigma."""
    rng = np.random.default_rng(seed)
    rows, t = [], 0.0
    for T in (16, 32, 64, 128, 256, 512):
        for _ in range(6):
            d = (0.002 + 1e-5 * T) * rng.lognormal(0, sigma)
            rows.append(dict(layout="monolithic", role="mixed", start_s=t, duration_s=d,
                             num_prefill_tokens=T, num_prefill_seqs=1, num_decode_seqs=0,
                             num_decode_ctx_tokens=0))
            t += d + 1.0
    for B in (1, 4, 16):
        for j in range(24):
            d = (0.001 + 2e-4 * B) * rng.lognormal(0, sigma)
            rows.append(dict(layout="monolithic", role="mixed", start_s=t, duration_s=d,
                             num_prefill_tokens=0, num_prefill_seqs=0, num_decode_seqs=B,
                             num_decode_ctx_tokens=B * (40 + j)))
            t += d + 1.0
    return pd.DataFrame(rows)


def test_noise_is_the_spread_of_repeated_shapes():
    w = fit_worker(_noisy_steps(0.2), "m")
    for q in (w.prefill_noise, w.decode_noise):
        assert len(q) == 100 and list(q) == sorted(q)
        assert q[50] == pytest.approx(1.0, abs=0.06)  # around each shape's own median
        assert 1.15 < q[90] / q[50] < 1.45  # lognormal 0.2: exp(1.28 * 0.2) = 1.29
    quiet = fit_worker(_noisy_steps(0.01), "m")
    assert quiet.decode_noise[98] < 1.05
    # too few repeated steps to say: no noise
    assert step_noise(np.ones(5), np.zeros((5, 1))) == ()
    assert step_noise(np.arange(1, 41, dtype=float), np.arange(40)[:, None]) == ()  # all distinct


def _profile(noise=()) -> Profile:
    w = simple_worker(0.004, 2e-5, 1e-9, 0.003, 2e-4, 1e-7, prefill_noise=noise,
                      decode_noise=noise)
    return Profile(workers={k: w for k in ("monolithic", "intra.prefill", "intra.decode")},
                   overhead=Overhead(request_in_s=0.002))


def _trace(n=200):
    rng = np.random.default_rng(4)
    return pd.DataFrame({"arrival_s": np.cumsum(rng.exponential(0.05, n)),
                         "prompt_tokens": rng.integers(8, 400, n),
                         "output_tokens": rng.integers(2, 60, n)})


def test_seeded_noise_is_deterministic_and_widens_the_tail():
    noise = tuple(np.quantile(np.random.default_rng(1).lognormal(0, 0.4, 5000),
                              (np.arange(100) + 0.5) / 100))
    wl, noisy, plain = _trace(), _profile(noise), _profile()
    for layout in ("monolithic", "intra"):
        a = simulate(wl, noisy, layout, seed=3).summary
        b = simulate(wl, noisy, layout, seed=3).summary
        c = simulate(wl, noisy, layout, seed=4).summary
        assert a["tbt_p99_s"] == b["tbt_p99_s"] and a["ttft_p50_s"] == b["ttft_p50_s"]
        assert a["tbt_p99_s"] != c["tbt_p99_s"]
        base = simulate(wl, plain, layout).summary
        assert a["tbt_p99_s"] > 1.2 * base["tbt_p99_s"]
        assert a["tbt_p50_s"] == pytest.approx(base["tbt_p50_s"], rel=0.25)
        # seed None: every step on its curve, as without noise
        assert simulate(wl, noisy, layout, seed=None).summary["tbt_p99_s"] == base["tbt_p99_s"]


def test_noise_travels_in_the_profile_and_bad_noise_is_refused(tmp_path):
    p = _profile((0.8, 1.0, 1.5))
    path = tmp_path / "p.json"
    path.write_text(p.dumps())
    assert load_profile(str(path)).workers["monolithic"].decode_noise == (0.8, 1.0, 1.5)
    doc = json.loads(p.dumps())
    doc["workers"]["monolithic"]["decode_noise"] = [1.5, 0.8]
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="noise"):
        load_profile(str(path))
    # a profile without the fields (before they existed) loads with no noise
    for w in doc["workers"].values():
        w.pop("decode_noise"), w.pop("prefill_noise")
    path.write_text(json.dumps(doc))
    assert not load_profile(str(path)).workers["monolithic"].noisy


def test_an_unknown_decode_attention_is_refused(tmp_path):
    doc = json.loads(_profile().dumps())
    doc["workers"]["monolithic"]["decode_attention"] = "sparse"
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError, match="decode_attention"):
        load_profile(str(path))


def _decode_worker_steps(seed: int = 0):
    """A split decode worker's calibration-like steps at B = 4, one every 3 ms, and the
    server's request rows: an arrival every 20th step. A step an arrival falls in runs 3x."""
    rng = np.random.default_rng(seed)
    rows, reqs, t = [], [], 0.0
    for j in range(400):
        hit = j % 20 == 5
        if hit:
            reqs.append(dict(layout="intra", arrival_s=t + 0.0002, prefill_end_s=np.nan))
        d = 0.001 * rng.lognormal(0, 0.05) * (3.0 if hit else 1.0)
        rows.append(dict(layout="intra", role="decode", start_s=t, duration_s=d,
                         num_prefill_tokens=0, num_prefill_seqs=0, num_decode_seqs=4,
                         num_decode_ctx_tokens=4 * 64))
        t += 0.003
    return pd.DataFrame(rows), pd.DataFrame(reqs)


def test_a_decode_workers_steps_the_front_worked_in_get_their_own_noise():
    steps, reqs = _decode_worker_steps()
    w = fit_worker(steps, "intra.decode", requests=reqs)
    assert len(w.decode_event_noise) == 100 and len(w.decode_noise) == 100
    assert w.decode_event_noise[50] == pytest.approx(3.0, rel=0.1)  # the steps arrivals hit
    assert w.decode_noise[98] < 1.2                                 # the rest
    # without the request rows, or for a worker that is not a split decode worker: one table
    alone = fit_worker(steps, "intra.decode")
    assert alone.decode_event_noise == () and alone.decode_noise[98] > 2.5
    mono = fit_worker(steps.assign(role="mixed"), "monolithic", requests=reqs)
    assert mono.decode_event_noise == ()
    # too few event steps (under 20): the pooled table, as before
    few, few_reqs = _decode_worker_steps()
    assert fit_worker(few, "intra.decode", requests=few_reqs.iloc[:10]).decode_event_noise == ()


def test_the_simulator_draws_the_event_table_for_steps_the_front_works_in():
    wl = _trace()
    quiet = (1.0,) * 100
    calm = _profile(quiet)
    w = calm.workers["intra.decode"]
    bursty = replace(calm, workers={**calm.workers,
                                    "intra.decode": replace(w, decode_event_noise=(5.0,) * 100)})
    a = simulate(wl, calm, "intra", seed=3).summary
    b = simulate(wl, bursty, "intra", seed=3).summary
    c = simulate(wl, bursty, "intra", seed=3).summary
    assert b == c  # deterministic for a seed
    # the arrivals and first tokens hit some steps, not most: the tail grows, the median less
    assert b["tbt_p99_s"] > 1.5 * a["tbt_p99_s"]
    assert b["tbt_p50_s"] < 1.5 * a["tbt_p50_s"]
    # the table travels in the profile
    back = Profile.from_dict(json.loads(bursty.dumps()))
    assert back.workers["intra.decode"].decode_event_noise == (5.0,) * 100
