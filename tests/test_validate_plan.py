"""validate's plan: the largest plan that fits the budget, shrunk in a fixed order and said
so, or one line naming what it would need."""
import types

import numpy as np
import pytest

from gpuprobe.errors import UserError
from gpuprobe.validate.plan import MIN_SEEDS, make_plan
from gpuprobe.validate.replay_rate import replay_rate

T = np.cumsum(np.random.default_rng(1).exponential(0.5, 300))  # 2 req/s for 150 s
OPTS = types.SimpleNamespace(replays=3, interleave=True, sim_seeds=9)


def _plan(budget_s, capacity=1.0, pass_s=20.0):
    return make_plan(lambda span: replay_rate(T, capacity, 0.5, max_span_s=span),
                     lambda rate: float(rate.arrival_s[-1]) * 1.25 + 2.0, 0.5, OPTS,
                     ("monolithic", "intra", "cross"), start_s=8.0, pass_s=pass_s,
                     spent_s=30.0, budget_s=budget_s)


def test_a_roomy_budget_keeps_the_full_plan_at_the_asked_load():
    plan = _plan(3000)
    assert plan.fits() and not plan.shrunk
    assert (plan.replays, plan.passes, plan.sim_seeds) == (3, 4, 9)
    assert plan.rate.peak_load <= 0.5 * 1.02 and plan.rate.arrival_s[-1] <= 60 + 1e-6
    assert [plan.pass_after(i) for i in range(3)] == [True, True, True]
    assert plan.total_s == pytest.approx(plan.to_dict()["expected_s"]["total"])


def test_a_tight_budget_drops_passes_then_requests_never_the_load():
    full = _plan(3000)
    plan = _plan(900)  # room for the passes before and after the replays
    assert plan.fits() and plan.interleave and plan.passes == 2 and plan.replays == 3
    assert [plan.pass_after(i) for i in range(3)] == [False, False, True]
    plan = _plan(800)  # not for those: one pass and a recheck, and fewer requests
    assert plan.fits() and plan.total_s <= 800 and not plan.interleave and plan.replays == 3
    assert "calibration passes" in plan.shrunk[0] and "recheck" in plan.shrunk[1]
    assert plan.rate.requests < full.rate.requests and plan.rate.peak_load <= 0.5 * 1.02
    assert "requests over" in plan.shrunk[2] and "(the same load)" in plan.shrunk[2]
    assert any("plan shrunk" in ln for ln in plan.lines())


def test_a_budget_too_small_for_the_smallest_plan_is_one_line():
    with pytest.raises(UserError, match=r"--budget 120 s is too small .* needs about \d+ s"):
        _plan(120)


def test_replays_go_last_and_what_they_free_is_given_back():
    plan = _plan(600)
    assert plan.fits() and plan.replays == 2 and not plan.interleave
    assert plan.sim_seeds in (MIN_SEEDS, 9) and "2 replays per layout" in plan.shrunk[-1]
