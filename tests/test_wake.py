"""The wake-up of an idle worker: fitted from idle probes, charged by the simulator only when
work finds the worker idle, kept in the profile's JSON."""
from dataclasses import replace

import pytest

from gpuprobe.perf.costmodel import Profile, StepCost, simple_worker
from gpuprobe.sim.simulator import simulate
from gpuprobe.perf.wake import (
    SPREAD_QUANTILES,
    fit_wake,
    spread_wake_fn,
    step_wake_samples,
    wake_fields,
    wake_fn,
    wake_samples,
    wake_spread,
)

import pandas as pd


def _rec(n, ttft, **kw):
    return {"prompt_tokens": n, "ttft_s": ttft, "status": "ok", **kw}


def test_samples_are_the_excess_over_the_same_size_back_to_back():
    cal = {"prefill": [_rec(64, 0.010), _rec(64, 0.012), _rec(64, 0.011), _rec(128, 0.020)],
           "wake": [_rec(64, 0.013, idle_s=0.1), _rec(128, 0.021, idle_s=0.3),
                    _rec(256, 0.050, idle_s=0.3),   # no back-to-back 256: left out
                    {**_rec(64, 0.5, idle_s=0.1), "status": "http_500"}]}
    got = wake_samples(cal)
    assert got == [(0.1, pytest.approx(0.002)), (0.3, pytest.approx(0.001))]
    assert wake_samples({"prefill": cal["prefill"]}) == []  # an old calibration: no probes


def _row(n, arrival, start, dur, out=1):
    return {"prompt_tokens": n, "output_tokens": out, "arrival_s": arrival,
            "prefill_start_s": start, "prefill_end_s": start + dur}


def test_step_samples_are_the_probes_extra_step_time_over_the_same_size_back_to_back():
    sweep = pd.DataFrame([_row(64, 0, 0, 0.004), _row(64, 1, 1, 0.006), _row(64, 2, 2, 0.005),
                          _row(128, 3, 3, 0.008),
                          _row(64, 4, 4, 0.050, out=24)])   # a decode burst's: not the sweep's
    # Server rows out of order: they pair with the gaps by arrival, the order they were sent.
    probes = pd.DataFrame([_row(128, 11, 11.01, 0.011), _row(64, 10, 10.001, 0.009),
                           _row(256, 12, 12, 0.040)])       # no back-to-back 256: left out
    got = step_wake_samples([0.1, 0.3, 0.3], sweep, probes)
    assert got == [(0.1, pytest.approx(0.004)), (0.3, pytest.approx(0.003))]
    # Rows that do not pair with the probes sent: [] (the caller keeps the client's excess).
    assert step_wake_samples([0.1, 0.3], sweep, probes) == []
    assert step_wake_samples([0.1, 0.3, 0.3], sweep, probes.drop(columns="prefill_end_s")) == []


def test_a_pass_wake_comes_from_the_steps_where_the_rows_pair_else_from_the_client():
    from gpuprobe.validate.layout_probe import _wake_of

    sweep = pd.DataFrame([_row(64, 0, 0, 0.004)])
    probes = pd.DataFrame([_row(64, 10, 10, 0.007)])
    client = [(0.1, 0.009)]
    assert _wake_of({"wake": client, "requests": sweep, "probe_requests": probes}) == \
        [(0.1, pytest.approx(0.003))]
    assert _wake_of({"wake": client, "requests": sweep, "probe_requests": probes.iloc[:0]}) == client
    assert _wake_of({"wake": client}) == client
    assert _wake_of({"requests": sweep, "probe_requests": probes}) == []


def test_fit_takes_medians_clips_at_zero_and_pools_where_it_would_fall_with_the_gap():
    samples = [(0.03, -0.001), (0.03, -0.002), (0.1, 0.003), (0.1, 0.001), (0.1, 0.002),
               (0.3, 0.001), (0.3, 0.0015)]
    # 0.1 s alone: 2 ms, 0.3 s: 1.25 ms; pooled, the five samples' median (not the 2 ms a
    # running maximum would carry on)
    assert fit_wake(samples) == ((0.03, 0.0), (0.1, 0.0015), (0.3, 0.0015))
    rising = [(0.03, 0.0), (0.1, 0.001), (0.3, 0.004)]
    assert fit_wake(rising) == tuple(rising)
    assert fit_wake([]) == ()


def test_wake_fn_is_linear_from_zero_and_flat_after_the_last_gap():
    f = wake_fn(((0.1, 0.002), (0.3, 0.004)), scale=2.0)
    assert f(0.0) == 0.0 and f(-1.0) == 0.0
    assert f(0.05) == pytest.approx(0.002)     # half of 0.002, times 2
    assert f(0.2) == pytest.approx(0.006)
    assert f(10.0) == pytest.approx(0.008) and f(float("inf")) == pytest.approx(0.008)
    assert wake_fn(()) is None and wake_fn(((0.1, 0.0),)) is None


def _wl(rows):
    return pd.DataFrame(rows, columns=["arrival_s", "prompt_tokens", "output_tokens"])


def test_an_input_that_finds_the_worker_idle_waits_for_it_to_wake_and_one_that_finds_it_busy_not():
    base = simple_worker(0.01, 1e-4, 1e-8, 0.005, 1e-3, 1e-6)
    wake = ((0.1, 0.004), (1.0, 0.02))
    prof = lambda w: Profile(workers={"monolithic": w, "intra.prefill": w, "intra.decode": base,
                                      "cross.prefill": w, "cross.decode": base})
    # 0: the first input (idle since ever: the last point); 1: arrives while 0 decodes;
    # 2: some 0.4 s after the engine went idle.
    wl = _wl([(0.0, 16, 100), (0.2, 16, 2), (1.0, 16, 2)])
    a = simulate(wl, prof(base), "monolithic").requests
    b = simulate(wl, prof(replace(base, wake=wake)), "monolithic").requests
    d = (b["ttft_s"] - a["ttft_s"]).tolist()
    assert d[0] == pytest.approx(0.02)
    # The same timeline as the first input arriving when its wake ended: no wake of its own.
    late = simulate(_wl([(0.02, 16, 100), (0.2, 16, 2), (1.0, 16, 2)]), prof(base),
                    "monolithic").requests
    assert b["ttft_s"][1] == pytest.approx(late["ttft_s"][1], abs=1e-12)
    idle = 1.0 - (wl["arrival_s"] + b["e2e_s"])[:2].max()  # since the engine's last step
    assert 0.1 < idle < 1.0
    assert d[2] == pytest.approx(0.004 + (0.02 - 0.004) * (idle - 0.1) / 0.9, rel=1e-3)
    # The split layouts charge the prefill worker's; the decode worker never wakes.
    assert simulate(wl, prof(replace(base, wake=wake)), "intra").requests["ttft_s"][0] == \
        pytest.approx(simulate(wl, prof(base), "intra").requests["ttft_s"][0] + 0.02)


def test_the_wake_lengthens_the_first_step_and_what_comes_meanwhile_waits_for_the_next():
    # The wake is fitted on the probes' prefill steps, so it belongs to the step that woke the
    # worker: a burst that lands during it is not folded into that step (a delay before the
    # batch was formed had the burst's prompts join it, and the first request waited for
    # them all), it waits for the next one.
    base = simple_worker(0.01, 1e-4, 1e-8, 0.005, 1e-3, 1e-6)
    w = replace(base, wake=((0.1, 0.02),))
    prof = Profile(workers={"monolithic": w, "intra.prefill": w, "intra.decode": base,
                            "cross.prefill": w, "cross.decode": base})
    alone = simulate(_wl([(0.0, 16, 2)]), prof, "monolithic").requests
    burst = simulate(_wl([(0.0, 16, 2), (0.005, 512, 2), (0.006, 512, 2)]), prof,
                     "monolithic").requests
    assert burst["ttft_s"][0] == pytest.approx(alone["ttft_s"][0], abs=1e-12)
    first = burst["arrival_s"] + burst["ttft_s"]
    assert first[1] > first[0] + 0.01  # a later step than the first one's


def test_the_wake_survives_the_profile_json_and_a_bad_one_is_refused():
    w = replace(simple_worker(0.01, 1e-4, 0, 0.005, 1e-3, 0), wake=((0.03, 0.0), (0.3, 0.002)))
    assert StepCost.from_dict(w.to_dict()).wake == w.wake
    for bad in ([[0.3, 0.002], [0.1, 0.001]], [[0.0, 0.001]], [[0.1, -0.001]]):
        with pytest.raises(ValueError, match="wake"):
            StepCost.from_dict({**w.to_dict(), "wake": bad})


def test_the_spread_is_how_far_the_probes_fell_from_the_curve():
    # 0.1 s: medians 2 ms; the probes 1, 2, 2, 3 and one 15 ms outlier.
    samples = [(0.1, x / 1e3) for x in (1, 2, 2, 3, 15)] + [(0.3, x / 1e3) for x in (2, 3, 4)]
    fields = wake_fields(samples)
    assert fields["wake"] == ((0.1, 0.002), (0.3, 0.003))
    q = fields["wake_spread"]
    assert len(q) == SPREAD_QUANTILES and list(q) == sorted(q)
    assert q[0] == pytest.approx(-0.001, abs=2e-4) and q[-1] == pytest.approx(0.013, abs=1e-3)
    assert wake_spread(samples[:7], fields["wake"]) == ()    # too few probes to say
    assert wake_spread(samples, ()) == ()


def test_a_drawn_wake_follows_the_probes_spread_never_goes_below_zero_and_fades_below_the_first_gap():
    import numpy as np

    points, spread = ((0.1, 0.002),), (-0.004, 0.0, 0.0, 0.010)
    f = spread_wake_fn(points, spread, 1.0, np.random.default_rng(1))
    draws = np.array([f(0.5) for _ in range(4000)])
    assert set(np.round(draws * 1e3, 9)) == {0.0, 2.0, 12.0}   # 2 - 4 ms clipped at 0
    assert draws.mean() == pytest.approx((0 + 0.002 + 0.002 + 0.012) / 4, rel=0.05)
    assert f(0.0) == 0.0
    small = {round(f(0.05) * 1e3, 9) for _ in range(200)}     # half the curve, half the spread
    assert small == {0.0, 1.0, 6.0}
    same = [spread_wake_fn(points, spread, 1.0, np.random.default_rng(7))(0.3) for _ in range(2)]
    assert same[0] == same[1]
    assert spread_wake_fn(points, (), 1.0, np.random.default_rng(1))(0.5) == pytest.approx(0.002)


def test_idle_arrivals_pay_draws_from_the_spread_alike_at_the_median_longer_on_the_mean():
    import numpy as np

    base = simple_worker(0.002, 1e-5, 0, 0.001, 1e-4, 0)
    # Probes: 2 ms most times, 20 ms one time in four (median 2 ms, mean 6.5 ms).
    spread = tuple(sorted([0.0] * 30 + [0.018] * 10))
    w_med = replace(base, wake=((0.1, 0.002),))
    w_spread = replace(w_med, wake_spread=spread)
    prof = lambda w: Profile(workers={"monolithic": w})
    # 200 lone requests, 0.5 s apart: each finds the worker idle.
    wl = _wl([(0.5 * i, 16, 1) for i in range(200)])
    none = simulate(wl, prof(base), "monolithic", seed=3).requests["ttft_s"]
    med = simulate(wl, prof(w_med), "monolithic", seed=3).requests["ttft_s"] - none
    drawn = simulate(wl, prof(w_spread), "monolithic", seed=3).requests["ttft_s"] - none
    assert np.allclose(med, 0.002)
    assert np.median(drawn) == pytest.approx(0.002, abs=1e-9)
    assert drawn.mean() == pytest.approx(0.0065, rel=0.25)
    # The same seed, the same run; no seed, the curve alone.
    again = simulate(wl, prof(w_spread), "monolithic", seed=3).requests["ttft_s"] - none
    assert np.array_equal(drawn, again)
    flat = simulate(wl, prof(w_spread), "monolithic", seed=None).requests["ttft_s"]
    assert np.allclose(flat - simulate(wl, prof(base), "monolithic", seed=None).requests["ttft_s"],
                       0.002)


def test_the_spread_survives_the_profile_json_and_a_bad_one_is_refused():
    w = replace(simple_worker(0.01, 1e-4, 0, 0.005, 1e-3, 0), wake=((0.1, 0.002),),
                wake_spread=(-0.001, 0.0, 0.004))
    assert StepCost.from_dict(w.to_dict()).wake_spread == w.wake_spread
    assert StepCost.from_dict({k: v for k, v in w.to_dict().items()
                               if k != "wake_spread"}).wake_spread == ()  # older profiles
    for bad in ([0.002, 0.001], [float("nan")], [float("inf")]):
        with pytest.raises(ValueError, match="wake_spread"):
            StepCost.from_dict({**w.to_dict(), "wake_spread": bad})
