"""The per-core speed probe: its arithmetic on known samples, and a real probe process."""
import time

import numpy as np
import pytest

from gpuprobe.validate.speed_probe import ratio, replay_factors, slowness, worker_cores


def _rows(t0, seconds, per_core_s):
    """Samples every 0.1 s alternating over the cores, each core at its fixed probe time."""
    rows, t, cores = [], t0, sorted(per_core_s)
    while t < t0 + seconds:
        for c in cores:
            rows.append((t, c, per_core_s[c]))
            t += 0.1
    return np.array(rows, dtype=float)


def test_a_two_core_worker_reads_the_mean_of_its_cores():
    rows = _rows(0.0, 10.0, {0: 0.004, 1: 0.006})
    assert slowness(rows, (0, 10), (0,)) == pytest.approx(0.004)
    assert slowness(rows, (0, 10), (0, 1)) == pytest.approx(0.005)


def test_ratio_follows_a_core_that_slowed_down_and_not_the_other():
    rows = np.vstack([_rows(0.0, 10.0, {0: 0.004, 1: 0.004}),
                      _rows(20.0, 10.0, {0: 0.004, 1: 0.007})])
    assert ratio(rows, (0, 10), (20, 30), (0,)) == pytest.approx(1.0)
    assert ratio(rows, (0, 10), (20, 30), (1,)) == pytest.approx(1.75)
    f = replay_factors(rows, (0, 10), [(20, 30)], worker_cores("intra", (0, 1), 0.5))
    assert f == [{"intra.prefill": pytest.approx(1.0), "intra.decode": pytest.approx(1.75)}]


def test_several_calibration_passes_are_one_reference_their_mean():
    rows = np.vstack([_rows(0.0, 10.0, {0: 0.004}), _rows(20.0, 10.0, {0: 0.006}),
                      _rows(40.0, 10.0, {0: 0.006})])
    assert ratio(rows, [(0, 10), (40, 50)], (20, 30), (0,)) == pytest.approx(1.2)
    # a pass the probe did not read is left out of the mean, not counted as zero
    assert ratio(rows, [(0, 10), (90, 99)], (20, 30), (0,)) == pytest.approx(1.5)


def test_too_few_samples_give_no_reading_and_factor_one():
    rows = _rows(0.0, 10.0, {0: 0.004, 1: 0.004})
    assert slowness(rows, (50, 60), (0,)) is None
    assert ratio(rows, (0, 10), (50, 60), (0, 1)) is None
    assert replay_factors(rows, (0, 10), [(50, 60)], {"monolithic": (0, 1)}) == [{"monolithic": 1.0}]


def test_worker_cores_match_the_servers_split():
    assert worker_cores("monolithic", (0, 1), 0.5) == {"monolithic": (0, 1)}
    assert worker_cores("cross", (0, 1, 2, 3), 0.25) == {"cross.prefill": (0,), "cross.decode": (1, 2, 3)}


@pytest.mark.timeout(90)
def test_the_probe_process_reads_every_core_and_stops():
    import os

    from gpuprobe.validate.speed_probe import SpeedProbe
    cores = tuple(sorted(os.sched_getaffinity(0)))[:2]
    with SpeedProbe(cores, period_s=0.05) as probe:
        assert probe.wait_ready(60)
        t0 = time.monotonic()
        time.sleep(1.5)
        t1 = time.monotonic()
        time.sleep(1.5)
        t2 = time.monotonic()
        proc = probe._proc
    rows = probe.samples()
    assert set(rows[:, 1].astype(int)) == set(cores)
    assert (rows[:, 2] > 0).all() and (rows[:, 2] < 1.0).all()  # CPU s per probe run
    r = ratio(rows, (t0, t1), (t1, t2), cores)
    assert r is not None and 0.2 < r < 5.0
    assert proc.poll() is not None  # stopped on exit
