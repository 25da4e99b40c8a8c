"""Calibration passes: each pass's CPU split by its sub-phases, and a time budget that
reserves the phases still to come at their mean length."""
import time

import pytest

from gpuprobe.validate.cpu_watch import PhaseGuard
from gpuprobe.validate.layout_probe import _front_points, _phase_cpu, _prefill_reps


def _rec(prompt: int, tokens: int) -> dict:
    return {"prompt_tokens": prompt, "token_times": [0.0] * tokens}


def _pass():
    cal = {"prefill": [_rec(16, 1), _rec(32, 1)] * 2,
           "decode": [(1, 32, [_rec(32, 24)]), (2, 32, [_rec(32, 24)] * 2), (1, 320, [_rec(320, 24)])]}
    marks = [("start", 0.0), ("prefill sweep 1/2", 1.0), ("prefill sweep 2/2", 1.5),
             ("decode sweep, prompt 32", 3.0), ("decode sweep, prompt 320", 4.0), ("end", 4.1)]
    return cal, marks


def test_each_sub_phase_gets_its_requests_tokens_and_cpu():
    cal, marks = _pass()
    got = _phase_cpu(cal, marks)
    # the first holds the warm-up request (64 prompt tokens, 4 out); the tail after the last
    # note goes to the last phase
    assert [g[:3] for g in got] == [(3, 112, 6), (2, 48, 2), (3, 96, 72), (1, 320, 24)]
    assert [g[3] for g in got] == pytest.approx([1.0, 0.5, 1.5, 1.1])
    # the two points the front's CPU is fitted on hold the same totals
    (r1, p1, t1, c1), (r2, p2, t2, c2) = _front_points(got, _prefill_reps(marks))
    assert (r1, p1, t1, r2, p2, t2) == (5, 160, 8, 4, 416, 96)
    assert (c1, c2) == pytest.approx((1.5, 2.6))


def test_the_idle_probes_cpu_is_no_sub_phase():
    cal, marks = _pass()
    # the probes ran from the last decode note to their own note (2 s), a tail after it
    marks[-1:] = [("idle probes", 6.0), ("end", 6.1)]
    got = _phase_cpu(cal, marks)
    assert [g[3] for g in got] == pytest.approx([1.0, 0.5, 1.5, 1.1])  # as without probes


def test_missing_cpu_readings_give_no_points():
    cal, marks = _pass()
    marks[2] = ("prefill sweep 2/2", None)
    assert _phase_cpu(cal, marks) == [] and _front_points([], _prefill_reps(marks)) == []


def test_the_budget_reserves_the_mean_phase_and_a_skipped_phase_frees_its_share():
    guard = PhaseGuard(time.monotonic() + 100, phases_left=5, phase_s=30, max_wait_s=0)
    assert guard.spare_s() < 0            # before any phase: 30 s each, 180 s > 100 s
    guard.took = [10.0, 10.0]             # phases of 10 s so far: 100 - 10 - 5 * 10 = 40 s over
    assert 35 < guard.spare_s() <= 40
    guard.skip()
    assert 45 < guard.spare_s() <= 50
