"""The layout decision: search every candidate's goodput, rank them with the one rule, and
say why, how sure and by how much.

    rec = recommend(workload_df, profile, parse_slo("chat"), devices=2)   # a Recommendation
    rec.deployment, rec.max_goodput_rps_per_device, rec.reasons

gpuprobe.decide.decision.run_decision runs the whole flow around it (what-if, forecast,
outlook, store).
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Callable

import pandas as pd

from gpuprobe.decide import reasons as why
from gpuprobe.decide.answer import NoLayoutMeets, decision_sentence, infeasible
from gpuprobe.decide.bounds import Lengths, goodput_bound
from gpuprobe.decide.candidates import SIMPLER_FIRST
from gpuprobe.decide.predict import MAX_NUM_SEQS, profile_for
from gpuprobe.decide.prices import cost_per_million, device_price
from gpuprobe.decide.rank import rank
from gpuprobe.decide.recommendation import Confidence, Deployment, Recommendation
from gpuprobe.decide.search import base_rate, decide_top, offered, search_candidates
from gpuprobe.decide.space import Space, layout_space
from gpuprobe.errors import UserError
from gpuprobe.perf.costmodel import Link, Profile
from gpuprobe.perf.metrics import Slo
from gpuprobe.workloads.loading import as_workload

# --link: per-direction bandwidth and a one-way latency. NVLink 4 (H100/H200): 900 GB/s both
# directions together; InfiniBand NDR: 400 Gb/s; RoCE: a 200 GbE port; TCP: what one stream
# gets on 25 GbE. Assumptions beside the datasheets, as the roofline's are.
LINKS = {"nvlink": Link(10e-6, 450e9, "--link nvlink"), "ib": Link(20e-6, 50e9, "--link ib"),
         "roce": Link(30e-6, 25e9, "--link roce"), "tcp": Link(100e-6, 3e9, "--link tcp")}
OFFERED_TOP = 3  # candidates that also get their figures at the workload's own rate
PRUNE_FROM = 24  # more candidates than this (TP sizes, many devices): bound and prune them


def recommend(workload_df: pd.DataFrame, profile: Profile, slo: Slo, devices: int = 1,
              link: str | float | None = None, cost_per_device_hour: float | None = None,
              evidence_store=None, progress: Callable[[str], None] | None = None,
              layouts=SIMPLER_FIRST, seed: int | None = 0,
              workload_name: str | None = None) -> Recommendation:
    """The search, ranking and reasons of one decision, not stored. workload_df:
    arrival_s, prompt_tokens, output_tokens (as_workload: sorted once where it was not);
    devices: how many the deployment has (cross xPyD fits within them); link: 'nvlink',
    'ib', 'roce', 'tcp' or GB/s for cross's KV link (default: the profile's);
    evidence_store: a Store to read GPU counters and validate results from. UserError on
    bad input, also when no candidate meets the SLO at any rate (naming the closest)."""
    t0 = time.perf_counter()
    wl = as_workload(workload_df)
    if len(wl) < 2:  # one request has no rate to search: every "rate" would read 0% met
        raise UserError("the workload has 1 request: recommend needs at least 2 to search the "
                        "rate each layout sustains (raise --limit)")
    if devices < 1:
        raise UserError(f"--devices must be at least 1, got {devices}")
    check_model(profile, wl)
    profile = with_link(profile, link)
    space = layout_space(profile, devices, layouts)
    cands = list(space.candidates)
    if not cands:
        raise UserError(f"no candidate layout fits {devices} device(s) with layouts {', '.join(layouts)}")
    rows = search_candidates(wl, profile, cands, slo, progress, seed,
                             bound=_bound(wl, profile, slo, len(cands)))
    rows = decide_top(wl, profile, cands, slo, rows, progress, seed)
    pruned = [r for r in rows if r.get("pruned")]
    ranked = rank([r for r in rows if not r.get("pruned")])
    by_label = {c.label: c for c in cands}
    if not ranked[0]["meets_slo"]:
        raise NoLayoutMeets(infeasible(ranked, slo))
    for r in ranked[:OFFERED_TOP]:
        r["at_offered"] = offered(wl, profile, by_label[r["label"]], slo, devices, seed)
    best = ranked[0]
    runner = ranked[1] if len(ranked) > 1 else None
    other = next((r for r in ranked[1:] if r["layout"] != best["layout"]), None)
    margin, margin_layout = _margin(best, runner), _margin(best, other)
    unit = by_label[best["label"]]
    reasons = build_reasons(wl, profile, slo, best, runner, other, margin, evidence_store, workload_name)
    reasons += layout_reasons(space, unit, devices)
    price = device_price(profile.meta, cost_per_device_hour)
    mean_out = float(wl["output_tokens"].mean())
    for r in ranked:
        r["cost_per_million_output_tokens"] = cost_per_million(
            price.usd_per_device_hour, r["max_goodput_rps_per_device"], mean_out)
    rec = Recommendation(
        deployment=Deployment.of(unit, replicas=devices // unit.devices,
                                 link=None if link is None or unit.layout != "cross" else str(link)),
        max_goodput_rps_per_device=best["max_goodput_rps_per_device"],
        candidates=tuple(ranked), reasons=tuple(reasons), slo=slo,
        confidence=confidence(profile, margin_layout, reasons), margin=margin,
        margin_over_other_layout=margin_layout, runner_up=runner["label"] if runner else None,
        max_devices=devices,
        workload={"name": workload_name, "requests": int(len(wl)), "rate_rps": base_rate(wl),
                  "span_s": float(wl["arrival_s"].iloc[-1]), **wl.attrs.get("gpuprobe_scaled", {})},
        profile={"name": profile.name, "meta": profile.meta,
                 "confidence": profile.confidence(tuple(layouts))},
        search={"seconds": time.perf_counter() - t0, "candidates": len(ranked),
                "simulations": sum(r["simulations"] for r in rows),
                "sample_requests": max(r["search_requests"] for r in rows),
                "repeats": max(r.get("repeats", 1) for r in rows),
                "pruned": [{"label": r["label"], "bound_rps_per_device": r["bound_rps_per_device"]}
                           for r in pruned],
                "refused": list(space.refused)},
        cost_per_device_hour=price.usd_per_device_hour,
        cost_per_million_output_tokens=best["cost_per_million_output_tokens"],
        cost_basis=price.basis, cost_assumed=price.assumed)
    return replace(rec, decision=decision_sentence(rec))


def _bound(wl: pd.DataFrame, profile: Profile, slo: Slo, num_cands: int):
    """The goodput bound of each candidate (decide/bounds.py), or None where a handful of
    candidates are cheaper searched than ordered (the first found is then not the best)."""
    if num_cands <= PRUNE_FROM:
        return None
    lengths = Lengths.of(wl)
    batched = max(2048, int(wl["prompt_tokens"].max()))  # layout_config's step budget
    return lambda c: goodput_bound(c, profile_for(profile, c), lengths, slo, MAX_NUM_SEQS, batched)


def layout_reasons(space: Space, unit, devices: int) -> list[dict]:
    """How the devices are laid out (copies of the unit, or why some stay idle) and which TP
    sizes memory left out, each with its numbers."""
    copies = devices // unit.devices
    idle = devices - copies * unit.devices
    text = (f"{copies} cop{'y' if copies == 1 else 'ies'} of {unit.label} ({unit.devices} "
            f"device{'s' if unit.devices > 1 else ''} each) lay{'s' if copies == 1 else ''} out "
            f"all {devices} devices"
            if not idle else
            f"{idle} of {devices} devices stay idle: {space.idle or 'the unit does not divide them'}")
    out = [{"text": text, "evidence": {"unit_devices": unit.devices, "replicas": copies,
                                       "idle_devices": idle}}]
    if space.refused:
        out.append({"text": "; ".join(space.refused_lines()),
                    "evidence": {"refused": list(space.refused)}})
    return out


def check_model(profile: Profile, wl: pd.DataFrame) -> None:
    """Refuses a profile measured on another model than the workload's server ran, where both
    are known (the profile's meta['model'], the `model` column of a recorded workload: what
    gpuprobe's server or tap served). An imported public trace's column names someone else's
    service (BurstGPT's ChatGPT, GPT-4): its traffic is what the user's model is asked to serve."""
    pm = profile.meta.get("model")
    if not pm or "model" not in wl.columns or wl.attrs.get("gpuprobe_format") != "recorded":
        return
    models = {str(m) for m in wl["model"].dropna().unique() if str(m)}
    norm = {_norm(m) for m in models}
    if models and _norm(pm) not in norm:
        raise UserError(f"--profile is of model {pm!r} but the workload was served by "
                        f"{', '.join(sorted(models))}: profile that model's server")


def _norm(name: str) -> str:
    name = str(name).lower().rsplit("/", 1)[-1]
    return name[:-len("-shape")] if name.endswith("-shape") else name


def with_link(profile: Profile, link: str | float | None) -> Profile:
    """The profile with cross's KV link replaced (--link)."""
    if link is None:
        return profile
    if isinstance(link, str) and link.lower() in LINKS:
        new = LINKS[link.lower()]
    else:
        try:
            gbps = float(link)
        except (TypeError, ValueError):
            raise UserError(f"--link {link!r}: use {', '.join(LINKS)} or a bandwidth in GB/s") from None
        if not gbps > 0 or not math.isfinite(gbps):
            raise UserError(f"--link must be > 0 GB/s, got {link}")
        new = Link(profile.link("cross").latency_s, gbps * 1e9, f"--link {gbps:g} GB/s")
    return replace(profile, links={**profile.links, "cross": new})


def impossible(ranked: list[dict], slo: Slo) -> str:
    """'No layout meets the SLO ...; X comes closest ...' from rows where none met."""
    return infeasible(ranked, slo)["decision"]


def _margin(best: dict, other: dict | None) -> float | None:
    if other is None:
        return None
    g, h = best["max_goodput_rps_per_device"], other["max_goodput_rps_per_device"]
    return (g - h) / h if h > 0 else None


def build_reasons(wl, profile, slo, best, runner, other, margin, store,
                  workload_name: str | None = None) -> list[dict]:
    out = [why.ratio_reason(wl)]
    g = best["max_goodput_rps_per_device"]
    if runner is not None:
        rg = runner["max_goodput_rps_per_device"]
        rel = "ties with" if margin is not None and margin < 0.05 else "beats"
        out.append({"text": f"{best['label']} sustains {g:.3g} req/s per device within the SLO and "
                            f"{rel} {runner['label']} ({rg:.3g}); ties go to the lower p99 TBT, then "
                            f"the simpler layout",
                    "evidence": {"best": best["label"], "goodput": g, "runner_up": runner["label"],
                                 "runner_up_goodput": rg, "margin": margin,
                                 "tbt_p99_s": best["tbt_p99_s"], "runner_up_tbt_p99_s": runner["tbt_p99_s"]}})
    out.append(why.mixed_step_reason(profile, wl, slo))
    out.append(why.handoff_reason(profile, wl, slo, best["layout"] if best["layout"] != "monolithic"
                                  else (other or {}).get("layout", "cross")))
    for extra in (why.counter_reason(store),
                  why.validate_reason(store, profile, workload_name, best["layout"])):
        if extra:
            out.append(extra)
    return out


def confidence(profile: Profile, margin_layout: float | None, reasons: list[dict]) -> Confidence:
    """0-1, a word and why: a measured profile and a wide margin over the best other layout
    make it high; a profile with assumed parts, a thin margin, a validate run that missed its
    bar, or one on the same workload that measured another layout best lower it."""
    measured = profile.confidence(SIMPLER_FIRST)["level"] == "high"
    value = 0.85 if measured else 0.55
    m = 0.2 if margin_layout is None else max(0.0, margin_layout)
    value *= 0.5 + 0.5 * min(1.0, m / 0.2)
    why = ["the profile is measured" if measured else "the profile assumes some figures it did not measure",
           f"{m:.0%} margin over the best other layout"]
    v = next((r["evidence"] for r in reasons if "bar_met" in r["evidence"]), None)
    if v is not None and v.get("bar_met") is not None:
        value = min(0.95, value + 0.1) if bool(v["bar_met"]) else value * 0.8
        why.append("the last validate met its accuracy bar" if bool(v["bar_met"])
                   else "the last validate missed its accuracy bar")
    if v is not None and v.get("same_workload") and v.get("agrees") is False:
        value *= 0.6  # the measurement on this workload names another layout
        why.append(v["comparison"])
    word = "high" if value >= 0.7 else "medium" if value >= 0.45 else "low"
    return Confidence(round(value, 3), word, "; ".join(why))
