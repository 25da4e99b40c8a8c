"""validate's replay schedule: the load at the busiest stretch, idle gaps cut, a span bound."""
import numpy as np
import pytest

from gpuprobe.validate.replay_rate import busiest_rate, cut_idle, peak_window, replay_rate


def _bursty(n_quiet=40, n_burst=60, seed=0):
    """A quiet minute (one request a second and a half), a long silence, then a burst of
    n_burst requests 10 ms apart: the shape of the Azure code trace's first requests."""
    quiet = np.arange(n_quiet) * 1.5
    burst = quiet[-1] + 300.0 + np.arange(n_burst) * 0.01
    return np.concatenate([quiet, burst])


def test_busiest_rate_finds_the_burst():
    t = _bursty()
    assert peak_window(len(t)) == 20
    assert busiest_rate(t, 20) == pytest.approx(19 / 0.19)
    assert busiest_rate(np.zeros(30), 10) == float("inf")  # one instant: no finite rate


def test_peak_basis_puts_the_busiest_stretch_at_the_load_and_cuts_idle_gaps():
    t = _bursty()
    r = replay_rate(t, capacity_rps=50.0, load=0.5, max_idle_s=1.0)
    assert r.basis == "peak"
    assert r.peak_rps == pytest.approx(25.0) and r.peak_load == pytest.approx(0.5)
    gaps = np.diff(r.arrival_s)
    assert gaps.max() <= 1.0 + 1e-12  # the 300 s silence (and the quiet minute's gaps) cut
    assert r.idle_cut_s > 100
    # the burst keeps its shape: its gaps are the trace's scaled by the same speed
    assert gaps[-1] == pytest.approx(0.01 / r.speed)
    # the mean is far below the peak: what a mean-based load would have hidden
    assert r.mean_load < 0.5


def test_mean_basis_keeps_the_plain_definition_and_the_gaps():
    t = _bursty()
    r = replay_rate(t, capacity_rps=50.0, load=0.35, basis="mean")
    assert r.mean_rps == pytest.approx(0.35 * 50.0)
    assert r.idle_cut_s == 0 and np.allclose(r.arrival_s, t / r.speed)
    assert r.peak_load > 1  # the burst then runs past capacity


def test_rate_overrides_the_load():
    t = _bursty()
    r = replay_rate(t, capacity_rps=50.0, load=0.5, rate_rps=7.0)
    assert r.basis == "rate" and r.mean_rps == pytest.approx(7.0)


def test_span_bound_replays_fewer_requests_at_the_asked_load_not_a_higher_load():
    t = np.cumsum(np.full(200, 0.5))  # evenly spaced: no quiet gap to cut
    free = replay_rate(t, capacity_rps=10.0, load=0.2, max_idle_s=1.0)
    assert free.arrival_s[-1] > 60
    bound = replay_rate(t, capacity_rps=10.0, load=0.2, max_idle_s=1.0, max_span_s=30.0)
    assert bound.arrival_s[-1] <= 30.0 + 1e-6
    assert bound.peak_load <= 0.2 * 1.02 and bound.mean_load <= 0.2 * 1.02
    assert 55 <= bound.requests < 200 and bound.info()["workload_requests"] == 200
    # a simultaneous burst has no finite peak rate: the bound alone sets the schedule
    burst = replay_rate(np.r_[np.zeros(50), np.arange(1, 51) * 10.0], 10.0, 0.5,
                        max_idle_s=1.0, max_span_s=20.0)
    assert 0 < burst.arrival_s[-1] <= 20.0 + 1e-6


def test_a_low_capacity_never_lets_the_idle_cut_raise_the_load():
    # a request every 0.5 s against a capacity of one a second (prompts 10x longer): the
    # asked 0.5 is a request every 2 s, so a 1 s cap on the gaps would double the load
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.exponential(0.5, 300))
    r = replay_rate(t, capacity_rps=1.0, load=0.5, max_idle_s=1.0, max_span_s=30.0)
    assert r.peak_load <= 0.5 * 1.02 and r.mean_load <= 0.5 * 1.02
    assert r.requests >= 20 and r.first + r.requests <= 300  # a window of the workload


def test_the_window_is_the_busiest_stretch():
    # a quiet hour, then a dense burst: the replayed window is the burst
    t = np.r_[np.arange(100) * 36.0, 3600.0 + np.arange(200) * 0.05]
    r = replay_rate(t, capacity_rps=4.0, load=0.5, max_idle_s=1.0, max_span_s=30.0)
    assert r.first >= 90 and r.peak_load <= 0.51


def test_span_bound_compresses_the_quiet_stretches_not_the_busiest():
    # a burst of 60 at 10 req/s, then 240 spread over 2400 s: at 0.5 x 20 req/s the burst
    # replays at its own pace, and the quiet part must shrink to fit 30 s
    rng = np.random.default_rng(3)
    t = np.r_[np.arange(60) * 0.1, 6.0 + np.cumsum(rng.exponential(10.0, 240))]
    r = replay_rate(t, capacity_rps=20.0, load=0.5, max_idle_s=1.0, max_span_s=30.0)
    assert r.arrival_s[-1] == pytest.approx(30.0, rel=1e-6)
    assert r.peak_load == pytest.approx(0.5, rel=0.02)  # the burst kept its load
    assert r.gap_cap_s < 1.0 and r.info()["gap_cap_s"] == r.gap_cap_s
    gaps = np.diff(r.arrival_s)
    assert gaps.max() == pytest.approx(r.gap_cap_s, rel=1e-6)
    assert np.allclose(gaps[:59], 0.1)  # the burst as it was
    # raising the whole rate instead would have run the burst at several times that load
    assert r.speed == pytest.approx(1.0)


def test_cut_idle():
    assert cut_idle(np.array([5.0, 5.5, 20.0, 20.1]), 1.0).tolist() == pytest.approx([0, 0.5, 1.5, 1.6])
    assert cut_idle(np.array([2.0, 9.0]), None).tolist() == [0.0, 7.0]


def test_unknown_basis_is_refused():
    with pytest.raises(ValueError, match="basis"):
        replay_rate(np.arange(5.0), 10.0, 0.5, basis="median")


def test_the_schedule_says_what_load_it_was_asked_for():
    t = _bursty()
    assert replay_rate(t, 50.0, 0.5).info()["load"] == 0.5
    assert replay_rate(t, 50.0, 0.5, rate_rps=7.0).info()["load"] is None
