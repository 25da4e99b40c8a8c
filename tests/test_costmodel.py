"""Cost model: least-squares fits recover known curves and flag poor ones; profiles round-trip."""
import json

import numpy as np
import pytest

from gpuprobe.perf.costmodel import DECODE_TERMS, Profile, simple_worker
from gpuprobe.perf.fit import least_squares


def test_fit_recovers_known_quadratic():
    T = np.array([16, 32, 64, 128, 256, 512, 1024], float)
    y = 0.002 + 1e-5 * T + 3e-9 * T ** 2
    fit = least_squares(np.c_[np.ones_like(T), T, T ** 2], y, ("1", "T", "Q"), T, "prefill")
    assert fit.coef == pytest.approx((0.002, 1e-5, 3e-9), rel=1e-6)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.confidence == "high" and fit.n_distinct == 7 and fit.x_max == 1024


def test_few_sizes_are_flagged_low():
    T = np.array([16, 16, 32, 32], float)
    fit = least_squares(np.c_[np.ones_like(T), T], 0.001 + 1e-5 * T, ("1", "T"), T, "prefill")
    assert fit.confidence == "low"
    assert any("distinct sizes" in r for r in fit.reasons)


def test_noisy_fit_is_flagged_by_r2():
    rng = np.random.default_rng(1)
    B = np.repeat(np.arange(1, 9, dtype=float), 3)
    y = 0.01 + rng.normal(0, 0.01, len(B)) ** 2
    fit = least_squares(np.c_[np.ones_like(B), B], y, ("1", "B"), B, "decode")
    assert fit.confidence == "low" and any("R^2" in r for r in fit.reasons)


def test_negative_coefficients_are_dropped():
    x = np.arange(1, 10, dtype=float)
    y = 0.01 - 1e-6 * x  # slightly decreasing: physically a constant
    fit = least_squares(np.c_[np.ones_like(x), x], y, ("1", "x"), x, "t")
    assert fit.coef[1] == 0.0 and fit.coef[0] > 0


def test_step_time_terms_and_mixed_step():
    w = simple_worker(0.01, 1e-4, 1e-8, 0.005, 1e-3, 1e-6, step_overhead_s=0.001)
    f = w.step_fn()
    assert f(100, 100 ** 2, 0, 0) == pytest.approx(0.01 + 0.01 + 1e-4 + 0.001)
    assert f(0, 0, 4, 400) == pytest.approx(0.005 + 0.004 + 0.0004 + 0.001)
    # A mixed step pays one fixed cost, not two.
    assert f(100, 1e4, 4, 400) == pytest.approx(f(100, 1e4, 0, 0) + f(0, 0, 4, 400) - 0.005 - 0.001)


def test_profile_json_round_trip_and_confidence():
    p = Profile(workers={"monolithic": simple_worker(0.01, 1e-4, 0, 0.005, 1e-3, 1e-6)})
    q = Profile.from_dict(json.loads(p.dumps()))
    assert q.workers["monolithic"].decode.terms == DECODE_TERMS
    assert q.workers["monolithic"].step_fn()(0, 0, 2, 10) == p.workers["monolithic"].step_fn()(0, 0, 2, 10)
    conf = q.confidence(("intra",))
    assert conf["level"] == "low"
    assert any("derived" in r for r in conf["reasons"])
    assert any("link not measured" in r for r in conf["reasons"])
    # Derived intra workers run slower than the whole device.
    assert q.worker("intra", "decode").step_fn()(0, 0, 2, 10) > p.worker("monolithic", "mixed").step_fn()(0, 0, 2, 10)


def test_front_cpu_is_solved_from_two_phases_and_stretches_steps():
    from gpuprobe.perf.contention import FrontCpu, fit_front_cpu, prompt_token_cpu, stretched
    # prefill sweep: 19 requests, 19 tokens; decode sweep: 100 requests, 2400 tokens
    r, k = 0.004, 8e-5
    f = fit_front_cpu([(19, 0, 19, 19 * r + 19 * k), (100, 0, 2400, 100 * r + 2400 * k)])
    assert (f.cpu_per_request_s, f.cpu_per_token_s) == pytest.approx((r, k), rel=1e-6)
    # CPU per prompt token: from sub-phases with the same requests and output tokens
    # (the decode sweep at two prompt lengths), then taken off before the two-phase solve
    p = 7.5e-6
    subs = [(10, 3000, 10, 10 * r + 3000 * p + 10 * k), (9, 2900, 9, 9 * r + 2900 * p + 9 * k),
            (100, 3200, 2400, 100 * r + 3200 * p + 2400 * k),
            (100, 32000, 2400, 100 * r + 32000 * p + 2400 * k)]
    assert prompt_token_cpu(subs) == pytest.approx(p)
    assert prompt_token_cpu(subs[:3]) == 0.0  # no two alike: not measured
    g = fit_front_cpu([tuple(map(sum, zip(*subs[:2]))), tuple(map(sum, zip(*subs[2:])))], p)
    assert (g.cpu_per_request_s, g.cpu_per_token_s, g.cpu_per_prompt_token_s) == pytest.approx(
        (r, k, p), rel=1e-6)
    assert g.cores_used(10.0, 20, 1000) == pytest.approx(10 * (r + 20 * k + 1000 * p))
    assert f.stretch(0.0, 20, 2) == 1.0
    # 50 req/s of 20 tokens: 0.28 cores of front and client over 2 cores -> 1 / (1 - 0.14)
    assert f.stretch(50.0, 20, 2) == pytest.approx(1 / (1 - 0.14))
    assert f.stretch(1e6, 20, 2) == pytest.approx(10.0)  # saturated: capped, not negative
    assert FrontCpu().stretch(50.0, 20, 2) == 1.0
    p = Profile(workers={"monolithic": simple_worker(0.001, 1e-5, 0, 0.002, 1e-4, 0)})
    s = stretched(p, 2.0)
    assert s.workers["monolithic"].step_fn()(0, 0, 4, 0) == pytest.approx(
        2 * p.workers["monolithic"].step_fn()(0, 0, 4, 0))


def test_kv_import_fit_recovers_a_per_request_cost_from_decode_steps():
    import pandas as pd

    from gpuprobe.perf.costmodel import StepCost
    from gpuprobe.perf.profile_fit import import_fit

    # A decode worker stepping back to back; the batch grows by n requests of ctx tokens before
    # some steps, and the gap before those is the loop gap plus n * (1 ms + 2 us * ctx).
    rows, t, B = [], 0.0, 1
    rng = np.random.default_rng(3)
    for i in range(60):
        n = int(rng.integers(1, 4)) if i % 3 == 0 else 0
        ctx = (32, 320)[i % 2]
        gap = 0.0005 + 1e-5 * B + (n * (0.001 + 2e-6 * ctx) if n else 0.0)
        t += gap
        B += n
        rows.append({"start_s": t, "duration_s": 0.003, "num_prefill_tokens": 0,
                     "num_decode_seqs": B, "num_decode_ctx_tokens": B * ctx, "role": "decode"})
        t += 0.003
    i0, i1 = import_fit(pd.DataFrame(rows), 0.0005, 1e-5)
    assert i0 == pytest.approx(0.001, rel=0.05) and i1 == pytest.approx(2e-6, rel=0.05)
    assert import_fit(pd.DataFrame(rows).assign(role="prefill"), 0.0005, 1e-5) == (0.0, 0.0)
    rt = StepCost.from_dict(simple_worker(0, 0, 0, 0, 0, 0, import_s=i0).to_dict())
    assert rt.import_s == i0 and rt.import_fn()(100) == pytest.approx(i0)


def test_front_load_goes_to_busy_time_and_to_the_idle_core():
    from gpuprobe.perf.contention import FrontCpu, busy_stretch

    f = FrontCpu(cpu_per_request_s=0.004, cpu_per_token_s=0.0, source="measured")  # 0.1 core at 25/s
    # One worker on all cores, busy 25% of the time: the front's 0.1 core lands in that quarter.
    mono = busy_stretch(f, 25.0, 1, {"monolithic": 0.25}, pinned=False)
    assert mono["monolithic"] == pytest.approx(1 / (1 - 0.4))
    # Always busy (capacity): the plain share.
    assert busy_stretch(f, 25.0, 1, {"monolithic": 1.0}, pinned=False)["monolithic"] == \
        pytest.approx(1 / (1 - 0.1))
    # Pinned workers: a busy prefill core and an idle decode core -> the decode worker pays.
    split = busy_stretch(f, 25.0, 1, {"p": 0.5, "d": 0.1}, pinned=True)
    assert split["p"] == 1.0 and split["d"] == pytest.approx(1 / (1 - 0.2))
    flipped = busy_stretch(f, 25.0, 1, {"p": 0.1, "d": 0.5}, pinned=True)
    assert flipped["d"] == 1.0 and flipped["p"] > 1.0
    assert busy_stretch(FrontCpu(), 25.0, 1, {"p": 0.5, "d": 0.1}, pinned=True) == {"p": 1.0, "d": 1.0}


def test_the_per_request_cpu_becomes_a_stall_and_the_per_token_cpu_stays_a_stretch():
    from gpuprobe.perf.contention import FrontCpu, arrival_stalled

    prof = Profile(workers={"monolithic": simple_worker(0.01, 1e-4, 0, 0.005, 1e-3, 0)})
    f = FrontCpu(cpu_per_request_s=0.006, cpu_per_token_s=0.0001, source="measured")
    p2, f2 = arrival_stalled(prof, f)
    assert p2.workers["monolithic"].arrival_stall_s == 0.006
    assert f2.cpu_per_request_s == 0.0 and f2.cpu_per_token_s == 0.0001
    # the per-prompt-token part goes with it
    p3, f3 = arrival_stalled(prof, FrontCpu(0.006, 0.0001, "measured", 5e-6))
    assert p3.workers["monolithic"].arrival_stall_per_token_s == 5e-6
    assert f3.cpu_per_prompt_token_s == 0.0
    assert prof.workers["monolithic"].arrival_stall_s == 0.0  # the input is not changed
