"""The autopilot's policy, a pure function: min-gain, min-dwell (the layout's and the
challenger's lead), cooldown, one retry then halt, no traffic. Exact clocks, no server."""
from __future__ import annotations

import math

from gpuprobe.autopilot.policy import (HOLD, SWITCH, PolicyConfig, PolicyState, after_switch,
                                       current_candidate, decide, gain_over, key, observe)

CFG = PolicyConfig(min_dwell_s=10.0, min_gain=0.1, cooldown_s=20.0)
MONO = {"layout": "monolithic", "params": {}, "max_goodput_rps_per_device": 4.0, "slo_attainment": 1.0}
INTRA = {"layout": "intra", "params": {"prefill_share": 0.5}, "max_goodput_rps_per_device": 6.0,
         "slo_attainment": 1.0}
INTRA_LOW = {"layout": "intra", "params": {"prefill_share": 0.3}, "max_goodput_rps_per_device": 2.0,
             "slo_attainment": 0.5}
CROSS = {"layout": "cross", "params": {"prefill_share": 0.5}, "max_goodput_rps_per_device": 3.0,
         "slo_attainment": 1.0}
PREFILL_HEAVY = [INTRA, MONO, CROSS]   # intra predicted 50% better than monolithic
# decode-heavy: monolithic predicted twice intra's goodput
DECODE_HEAVY = [{**MONO, "max_goodput_rps_per_device": 6.0}, {**INTRA, "max_goodput_rps_per_device": 3.0},
                CROSS]


def _state(now=0.0, layout="monolithic"):
    return observe(PolicyState(layout_since_s=now), layout, {}, now)


def _run(state, mixes, t0=100.0, interval=2.0, window=2.0, cfg=CFG):
    """Decide every interval over `mixes`, applying each switch as if it worked."""
    actions = []
    for i, cands in enumerate(mixes):
        now = t0 + i * interval
        d = decide(state, cands, now, now - window, cfg)
        state = d.state
        if d.action == SWITCH:
            state = after_switch(state, True, now, cfg, key(d.chosen["layout"], d.chosen["params"]))
        actions.append((now, d.action, state.layout, d.reason))
    return state, actions


def test_key_names_layout_and_share():
    assert key("monolithic", {"prefill_share": 0.4}) == "monolithic"
    assert key("intra", {"prefill_share": 0.5}) == "intra@0.5"
    assert key("cross", {"prefill_share": 0.25}) == "cross"  # the reference server's 1P1D
    assert key("cross", {"num_prefill": 2, "num_decode": 1}) == "cross 2P1D"
    assert key("monolithic", {"chunked_prefill": True, "max_num_batched_tokens": 512}) == "monolithic+chunk512"
    assert key("monolithic", {"chunked_prefill_tokens": 512}) == "monolithic+chunk512"  # as GET says it
    assert key("intra", {}) == "intra"


def test_current_candidate_is_same_layout_nearest_share():
    assert current_candidate([INTRA, INTRA_LOW, MONO], "intra@0.35") is INTRA_LOW
    assert current_candidate([INTRA, INTRA_LOW, MONO], "intra@0.45") is INTRA
    assert current_candidate([INTRA], "cross@0.5") is None


def test_gain_is_relative_goodput_or_absolute_attainment():
    assert math.isclose(gain_over(INTRA, MONO), 0.5)
    # equal goodput, better attainment: the attainment difference counts
    a = {**MONO, "slo_attainment": 0.7}
    assert math.isclose(gain_over(MONO, a), 0.3)
    assert gain_over(MONO, {**MONO, "max_goodput_rps_per_device": 0.0}) == math.inf
    # the fallback's offered-rate figure is read when the searched one is absent
    assert math.isclose(gain_over({"goodput_rps_per_device": 3.0}, {"goodput_rps_per_device": 2.0}), 0.5)


def test_switches_once_the_lead_has_held_for_min_dwell():
    state, acts = _run(_state(0.0), [DECODE_HEAVY] * 3 + [PREFILL_HEAVY] * 8)
    switches = [a for a in acts if a[1] == SWITCH]
    assert len(switches) == 1, acts
    # the lead starts with the window of the first decision that saw it (t=106, window 104-106);
    # 10 s after that window's start the switch goes
    assert switches[0][0] == 114.0 and "monolithic -> intra@0.5" in switches[0][3]
    assert [a[3].split(":")[0] for a in acts[3:7]] == ["dwell"] * 4
    assert state.layout == "intra@0.5" and state.layout_since_s == 114.0


def test_min_dwell_zero_switches_on_first_sight():
    cfg = PolicyConfig(0.0, 0.1, 0.0)
    _, acts = _run(_state(0.0), [DECODE_HEAVY, PREFILL_HEAVY, DECODE_HEAVY], cfg=cfg)
    assert [a[1] for a in acts] == [HOLD, SWITCH, SWITCH]


def test_oscillating_mix_faster_than_dwell_never_switches():
    mixes = ([DECODE_HEAVY] * 2 + [PREFILL_HEAVY] * 2) * 10  # 4 s each way, dwell 10 s
    state, acts = _run(_state(0.0), mixes)
    assert all(a[1] == HOLD for a in acts) and state.layout == "monolithic"
    assert any(a[3].startswith("dwell") for a in acts)  # it wanted to; the dwell held it


def test_gain_below_min_gain_holds_and_resets_the_lead():
    small = [{**INTRA, "max_goodput_rps_per_device": 4.2}, MONO]  # 5% better
    d = decide(_state(0.0), small, 100.0, 98.0, CFG)
    assert d.action == HOLD and d.reason.startswith("gain too small") and d.state.lead is None


def test_current_layout_best_holds():
    d = decide(_state(0.0), DECODE_HEAVY, 100.0, 98.0, CFG)
    assert d.action == HOLD and d.reason == "monolithic is predicted best"


def test_layout_in_place_less_than_dwell_holds():
    state = _state(95.0)  # put in place 5 s ago
    d = decide(state, PREFILL_HEAVY, 100.0, 80.0, CFG)
    assert d.action == HOLD and "in place 5.0 s < min-dwell 10 s" in d.reason


def test_cooldown_after_a_switch_blocks_the_next():
    cfg = PolicyConfig(min_dwell_s=0.0, min_gain=0.1, cooldown_s=20.0)
    state, acts = _run(_state(0.0), [PREFILL_HEAVY] + [DECODE_HEAVY] * 12, cfg=cfg)
    sw = [a[0] for a in acts if a[1] == SWITCH]
    assert sw == [100.0, 120.0], acts
    assert acts[1][3].startswith("cooldown")


def test_failed_switch_retried_once_after_cooldown_then_halts():
    cfg = PolicyConfig(min_dwell_s=0.0, min_gain=0.1, cooldown_s=20.0)
    state, tries = _state(0.0), []
    for i in range(30):
        now = 100.0 + 2 * i
        d = decide(state, PREFILL_HEAVY, now, now - 2, cfg)
        state = d.state
        if d.action == SWITCH:
            tries.append((now, d.reason))
            state = after_switch(state, False, now, cfg)
    assert [t for t, _ in tries] == [100.0, 120.0] and "(retry)" in tries[1][1]
    assert state.halted and state.failures == 2 and state.layout == "monolithic"
    assert d.action == HOLD and d.reason.startswith("halted")


def test_no_traffic_holds_and_says_so():
    d = decide(_state(0.0), [], 100.0, 98.0, CFG, traffic=False)
    assert d.action == HOLD and "no traffic" in d.reason


def test_a_layout_changed_by_someone_else_restarts_the_dwell():
    state = observe(_state(0.0), "cross", {"prefill_share": 0.5}, 50.0)
    assert state.layout == "cross" and state.layout_since_s == 50.0
    assert observe(state, "cross", {"prefill_share": 0.5}, 70.0) is state


def test_a_stalled_window_does_not_age_the_lead():
    # a lagging server: the decisions go on every 2 s, the newest finished arrival stays at
    # t=106, so the same window is re-read and the challenger's lead must not grow old on it
    state = _state(0.0)
    for i in range(10):
        now = 106.0 + 2 * i
        d = decide(state, PREFILL_HEAVY, now, 104.0, CFG, lead_now_s=106.0)
        state = d.state
        assert d.action == HOLD and d.reason.startswith("dwell: intra@0.5 has led for 2.0 s"), d.reason
    # traffic moves on: 8 s more of arrivals where intra still leads, and the switch goes
    d = decide(state, PREFILL_HEAVY, 126.0, 112.0, CFG, lead_now_s=114.0)
    assert d.action == SWITCH, d.reason
