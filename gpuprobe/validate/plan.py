"""validate's plan: how many requests a replay holds, at what load, how many calibration
passes and noise seeds, and how long each phase is expected to take, so that the whole run
fits its budget (`--budget`).

The plan is made once the monolithic layout has started and calibrated (its start and its
pass give this machine's phase lengths, its profile the capacity and how long a replay takes
to drain). Where the full plan does not fit, it shrinks in this order and says so: the
calibration passes between replays (the passes before and after a layout's replays stay),
the replay's span (fewer requests at the asked load, never a higher load; replay_rate.py),
the simulator's noise seeds, the replays per layout; where even the smallest plan does not
fit, validate stops with a line saying what it would need.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

MAX_SPAN_S = 60.0       # a replay's schedule ends within this (fewer requests beyond it)
MIN_SPAN_S = 12.0       # ... and is not cut below this to fit a budget
SPLIT_PASS = 1.3        # a split layout's calibration pass against monolithic's (handoffs)
DRAIN_MARGIN = 1.25     # a replay's run time against the monolithic simulation's
REPLAY_OVERHEAD_S = 2.0  # the client's start and the last records' flush
RECHECK_SHARE = 0.4     # a recheck (recheck.py) against a full calibration pass
MIN_SEEDS = 3


@dataclass(frozen=True)
class Plan:
    """What validate will run, with the expected seconds of each phase."""

    layouts: tuple[str, ...]
    replays: int
    passes: int              # calibration passes per layout (interleaved: 2..replays + 1)
    interleave: bool
    sim_seeds: int
    rate: object             # replay_rate.ReplayRate of the replayed window
    start_s: float           # a server's start
    pass_s: float            # monolithic's calibration pass (a split layout's: x SPLIT_PASS)
    replay_s: float          # a replay, drain included
    sim_s: float             # the predictions after the last replay
    spent_s: float           # before the plan (monolithic's start and first pass)
    budget_s: float
    shrunk: tuple[str, ...] = field(default=())

    def layout_s(self, layout: str) -> float:
        """Expected seconds of one layout's phases after the plan is made."""
        cal = self.pass_s * (1.0 if layout == "monolithic" else SPLIT_PASS)
        passes = self.passes if self.interleave else 1 + RECHECK_SHARE
        first = 0.0 if layout == "monolithic" else self.start_s + cal  # monolithic's is spent
        return first + (passes - 1) * cal + self.replays * self.replay_s

    @property
    def total_s(self) -> float:
        return self.spent_s + sum(self.layout_s(x) for x in self.layouts) + self.sim_s

    def fits(self) -> bool:
        return self.total_s <= self.budget_s

    def pass_after(self, i: int) -> bool:
        """Whether a calibration pass follows replay i (0-based) in the interleaved plan:
        always after the last; the others spread evenly over the passes the plan keeps."""
        if i == self.replays - 1:
            return True
        between = self.passes - 2  # passes between replays
        if between <= 0:
            return False
        step = (self.replays - 1) / between
        return any(int(round((k + 1) * step)) - 1 == i for k in range(between))

    def lines(self) -> list[str]:
        r = self.rate
        window = (f"{r.requests} of the workload's {r.requests_total} requests (from request "
                  f"{r.first}, around its busiest stretch)" if r.requests < r.requests_total
                  else f"all {r.requests} requests")
        load = (f"load {r.load:g} asked at the {r.basis} basis; offered peak {r.peak_load:.2f}, "
                f"mean {r.mean_load:.2f} of capacity" if r.load is not None
                else f"rate {r.mean_rps:.2f} req/s asked; peak {r.peak_load:.2f}, mean "
                     f"{r.mean_load:.2f} of capacity")
        out = [f"plan: {len(self.layouts)} layouts x {self.replays} replays of {window} over "
               f"{r.arrival_s[-1]:.1f} s; {load}",
               f"plan: {self.passes if self.interleave else 1} calibration pass(es) per layout"
               f"{'' if self.interleave else ' and a recheck'}, {self.sim_seeds} noise seeds",
               f"plan: expected server start {self.start_s:.0f} s, calibration pass "
               f"{self.pass_s:.0f} s (split layouts {self.pass_s * SPLIT_PASS:.0f} s), replay "
               f"{self.replay_s:.0f} s with its drain, predictions {self.sim_s:.0f} s; "
               + ", ".join(f"{x} {self.layout_s(x):.0f} s" for x in self.layouts)
               + f"; {self.spent_s:.0f} s spent; total {self.total_s:.0f} s of the "
                 f"{self.budget_s:.0f} s budget"]
        out += [f"plan shrunk to fit the budget: {s}" for s in self.shrunk]
        return out

    def to_dict(self) -> dict:
        return {"layouts": list(self.layouts), "replays": self.replays,
                "calibration_passes": self.passes if self.interleave else 1,
                "recheck": not self.interleave, "sim_seeds": self.sim_seeds,
                "requests_per_replay": self.rate.requests, "span_s": float(self.rate.arrival_s[-1]),
                "expected_s": {"server_start": self.start_s, "calibration_pass": self.pass_s,
                               "replay": self.replay_s, "predictions": self.sim_s,
                               **{x: self.layout_s(x) for x in self.layouts},
                               "total": self.total_s},
                "budget_s": self.budget_s, "shrunk": list(self.shrunk)}


def make_plan(schedule_for, replay_s_for, sim_s_per_seed: float, opts, layouts, start_s: float,
              pass_s: float, spent_s: float, budget_s: float) -> Plan:
    """The largest plan that fits budget_s (module docstring), or a UserError.

    schedule_for(span_s) -> ReplayRate: the replay window for a span; replay_s_for(rate) ->
    expected seconds of one replay of it (drain included); sim_s_per_seed: seconds of the
    predictions per noise seed."""
    from gpuprobe.errors import UserError

    span = MAX_SPAN_S
    rate = schedule_for(span)
    plan = Plan(layouts=tuple(layouts), replays=opts.replays,
                passes=opts.replays + 1 if opts.interleave else 1, interleave=opts.interleave,
                sim_seeds=opts.sim_seeds, rate=rate, start_s=start_s, pass_s=pass_s,
                replay_s=replay_s_for(rate), sim_s=sim_s_per_seed * opts.sim_seeds,
                spent_s=spent_s, budget_s=budget_s)
    shrunk = []
    if not plan.fits() and plan.interleave and plan.passes > 2:
        full = plan.passes
        while not plan.fits() and plan.passes > 2:
            plan = replace(plan, passes=plan.passes - 1)
        shrunk.append(f"{plan.passes} calibration passes per layout, not {full}")
    if not plan.fits() and plan.interleave:
        plan = replace(plan, interleave=False, passes=1)
        shrunk.append("one calibration pass before the replays and a short recheck after "
                      "them, not passes around the replays")
    full_n, full_span = rate.requests, float(rate.arrival_s[-1])
    while not plan.fits() and span > MIN_SPAN_S:
        span = max(MIN_SPAN_S, span * 0.8)
        rate = schedule_for(span)
        plan = replace(plan, rate=rate, replay_s=replay_s_for(rate))
    if not plan.fits() and plan.sim_seeds > MIN_SEEDS:
        plan = replace(plan, sim_seeds=MIN_SEEDS, sim_s=sim_s_per_seed * MIN_SEEDS)
        shrunk.append(f"{MIN_SEEDS} noise seeds per replay, not {opts.sim_seeds}")
    while not plan.fits() and plan.replays > 2:
        plan = replace(plan, replays=plan.replays - 1,
                       passes=min(plan.passes, plan.replays) if plan.interleave else 1)
        shrunk.append(f"{plan.replays} replays per layout, not {opts.replays}")
    if plan.fits() and plan.replays < opts.replays:  # one replay less may leave room: give
        plan, shrunk = _grow_back(plan, opts, schedule_for, replay_s_for, sim_s_per_seed,
                                  span, shrunk)  # the seeds and the span back where it fits
    if plan.rate.requests < full_n:
        shrunk.insert(sum("calibration pass" in x for x in shrunk),
                      f"replays of {plan.rate.requests} requests over "
                      f"{plan.rate.arrival_s[-1]:.0f} s, not {full_n} over {full_span:.0f} s "
                      f"(the same load)")
    plan = replace(plan, shrunk=tuple(shrunk))
    if not plan.fits():
        raise UserError(
            f"--budget {budget_s:.0f} s is too small for this workload on this machine: the "
            f"smallest plan ({plan.replays} replays of {plan.rate.requests} requests per layout, "
            f"{plan.passes if plan.interleave else 1} calibration passes) needs about "
            f"{plan.total_s:.0f} s; raise --budget, or pass fewer --layouts")
    return plan


def _grow_back(plan, opts, schedule_for, replay_s_for, sim_s_per_seed, span, shrunk):
    """After the replays were cut: the noise seeds back, then longer spans, while it fits."""
    if plan.sim_seeds < opts.sim_seeds:
        more = replace(plan, sim_seeds=opts.sim_seeds, sim_s=sim_s_per_seed * opts.sim_seeds)
        if more.fits():
            plan = more
            shrunk = [x for x in shrunk if "noise seeds" not in x]
    while span < MAX_SPAN_S:
        span = min(MAX_SPAN_S, span / 0.8)
        rate = schedule_for(span)
        more = replace(plan, rate=rate, replay_s=replay_s_for(rate))
        if not more.fits():
            break
        plan = more
    return plan, shrunk


def timed(fn):
    """(result, seconds) of fn()."""
    t0 = time.monotonic()
    out = fn()
    return out, time.monotonic() - t0
