"""The switching policy, a pure function: state + candidates' predictions + clock -> action.

    d = decide(state, candidates, now_s, window_start_s, cfg, traffic=True)
    d.action in ("switch", "hold"); d.reason says why; d.state is the state to keep.
    state = after_switch(d.state, ok, now_s, cfg)   # once a switch was tried

A candidate is a dict with `layout`, `params` (`prefill_share` for intra and cross) and
predicted `max_goodput_rps_per_device` (or, from the fallback, `goodput_rps_per_device`) and
`slo_attainment`; candidates[0] is the recommender's pick. The current layout's prediction is
the candidate of the same layout with the nearest prefill share.

A switch needs all of:
- gain: the pick beats the current layout's predicted goodput per device by `min_gain`
  (relative), or its SLO attainment by `min_gain` (absolute);
- dwell: the current layout has been in place for `min_dwell_s`, and the same challenger has
  led by `min_gain` in every decision since a point `min_dwell_s` back (counted from the start
  of the window in which it first led): a mix that swings back within the dwell resets it;
- cooldown: no switch attempt ended in the last `cooldown_s` (the caller passes after_switch
  the time the attempt ended);
- not halted: a switch that failed is retried once after the cooldown; a second failure
  halts switching for the rest of the run (the loop raises an event).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

SWITCH, HOLD = "switch", "hold"


@dataclass(frozen=True)
class PolicyConfig:
    min_dwell_s: float = 300.0
    min_gain: float = 0.1
    cooldown_s: float = 120.0
    retries: int = 1  # a failed switch is tried again this many times, each after the cooldown


@dataclass(frozen=True)
class PolicyState:
    layout: str | None = None          # the target's current layout key ("intra@0.5")
    layout_since_s: float = 0.0        # when it was put in place (or first seen)
    lead: str | None = None            # the challenger that led by min_gain last time
    lead_since_s: float | None = None  # start of the window in which it first led, unbroken
    last_try_s: float | None = None    # when a switch was last tried (ok or not)
    failures: int = 0                  # failed tries in a row
    halted: bool = False


@dataclass(frozen=True)
class Decision:
    action: str
    reason: str
    state: PolicyState
    chosen: dict | None = None   # the pick (candidates[0]) when there was one
    current: dict | None = None  # the current layout's candidate
    gain: float | None = None


def key(layout: str, params: dict | None = None) -> str:
    """One comparable name for a layout and what the server can switch of it: 'monolithic',
    'monolithic+chunk512', 'intra@0.5', 'cross' (1P1D), 'cross 2P1D' (x prefill and y
    decode workers: the server's own, or the remote ones it was given)."""
    p = params or {}
    if layout == "monolithic":
        chunk = p.get("max_num_batched_tokens") if p.get("chunked_prefill") else p.get("chunked_prefill_tokens")
        return f"monolithic+chunk{int(chunk)}" if chunk else "monolithic"
    if layout == "cross":
        x, y = int(p.get("num_prefill") or 1), int(p.get("num_decode") or 1)
        return "cross" if (x, y) == (1, 1) else f"cross {x}P{y}D"
    share = p.get("prefill_share")
    return layout if share is None else f"{layout}@{float(share):.2f}".rstrip("0").rstrip(".")


def observe(state: PolicyState, layout: str, params: dict | None, now_s: float) -> PolicyState:
    """The layout the target reports now; a change we did not make restarts the dwell."""
    k = key(layout, params)
    if k == state.layout:
        return state
    return replace(state, layout=k, layout_since_s=now_s if state.layout is not None
                   else state.layout_since_s or now_s, lead=None, lead_since_s=None)


def goodput(c: dict) -> float:
    v = c.get("max_goodput_rps_per_device")
    if v is None:
        v = c.get("goodput_rps_per_device")
    return float(v) if v is not None and math.isfinite(float(v)) else 0.0


def gain_over(best: dict, cur: dict) -> float:
    """Predicted gain of `best` over `cur`: relative goodput per device, or absolute SLO
    attainment, whichever is larger."""
    g_best, g_cur = goodput(best), goodput(cur)
    rel = (g_best - g_cur) / g_cur if g_cur > 0 else (math.inf if g_best > 0 else 0.0)
    att = float(best.get("slo_attainment") or 0.0) - float(cur.get("slo_attainment") or 0.0)
    return max(rel, att)


def current_candidate(candidates: list[dict], layout_key: str | None) -> dict | None:
    if not layout_key:
        return None
    layout, _, share = layout_key.partition("@")
    same = [c for c in candidates if c.get("layout") == layout]
    if not same or not share:
        return same[0] if same else None
    return min(same, key=lambda c: abs(float((c.get("params") or {}).get("prefill_share") or 0.5)
                                       - float(share)))


def decide(state: PolicyState, candidates: list[dict], now_s: float, window_start_s: float,
           cfg: PolicyConfig, traffic: bool = True, lead_now_s: float | None = None) -> Decision:
    """window_start_s and lead_now_s: the window's start and end on the clock a challenger's
    lead is aged on (the traffic's: a lead must show over min-dwell of arrivals, so decisions
    that re-read the same window of a stalled server do not age it); lead_now_s None: now_s.
    The layout's dwell and the cooldown count on now_s."""
    if not traffic:
        return Decision(HOLD, "no traffic in the window: holding the current layout",
                        replace(state, lead=None, lead_since_s=None))
    if not candidates:
        return Decision(HOLD, "no candidate was predicted: holding", state)
    best = candidates[0]
    cur = current_candidate(candidates, state.layout)
    best_key = key(best["layout"], best.get("params"))
    if best_key == state.layout:
        return Decision(HOLD, f"{state.layout} is predicted best", replace(
            state, lead=None, lead_since_s=None), best, cur, 0.0)
    if cur is None:
        g = math.inf
    else:
        g = gain_over(best, cur)
    if g < cfg.min_gain:
        return Decision(HOLD, f"gain too small: {best_key} beats {state.layout} by {g:.3f} "
                        f"< min-gain {cfg.min_gain:g}", replace(state, lead=None, lead_since_s=None),
                        best, cur, g)
    lead_since = state.lead_since_s if state.lead == best_key and state.lead_since_s is not None \
        else window_start_s
    state = replace(state, lead=best_key, lead_since_s=lead_since)
    d = dict(chosen=best, current=cur, gain=g)
    gain_txt = "inf" if math.isinf(g) else f"{g:.3f}"
    if state.halted:
        return Decision(HOLD, f"halted: a switch failed {state.failures} times; holding "
                        f"{state.layout} (restart the autopilot to try again)", state, **d)
    held = now_s - state.layout_since_s
    if held < cfg.min_dwell_s:
        return Decision(HOLD, f"dwell: {state.layout} in place {held:.1f} s < min-dwell "
                        f"{cfg.min_dwell_s:g} s (gain {gain_txt})", state, **d)
    led = (now_s if lead_now_s is None else lead_now_s) - lead_since
    if led < cfg.min_dwell_s:
        return Decision(HOLD, f"dwell: {best_key} has led for {led:.1f} s < min-dwell "
                        f"{cfg.min_dwell_s:g} s (gain {gain_txt})", state, **d)
    if state.last_try_s is not None and now_s - state.last_try_s < cfg.cooldown_s:
        return Decision(HOLD, f"cooldown: last switch tried {now_s - state.last_try_s:.1f} s "
                        f"ago < cooldown {cfg.cooldown_s:g} s (gain {gain_txt})", state, **d)
    retry = " (retry)" if state.failures else ""
    return Decision(SWITCH, f"switch{retry} {state.layout} -> {best_key}: predicted gain "
                    f"{gain_txt} >= min-gain {cfg.min_gain:g}", state, **d)


def after_switch(state: PolicyState, ok: bool, now_s: float, cfg: PolicyConfig,
                 new_key: str | None = None) -> PolicyState:
    """The state after a switch was tried: ok -> the new layout's dwell starts; failed -> one
    more failure, halted once the retries are spent."""
    if ok:
        return replace(state, layout=new_key or state.lead, layout_since_s=now_s, lead=None,
                       lead_since_s=None, last_try_s=now_s, failures=0)
    failures = state.failures + 1
    return replace(state, last_try_s=now_s, failures=failures, halted=failures > cfg.retries)
