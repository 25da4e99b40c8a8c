"""The layout decision: search every candidate's goodput, rank them with the one rule, and
say why, how sure and by how much.

    rec = recommend(workload_df, profile, parse_slo("chat"), devices=2)
    rec["layout"], rec["params"], rec["max_goodput_rps_per_device"], rec["reasons"]
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Callable

import numpy as np
import pandas as pd

from gpuprobe.decide import reasons as why
from gpuprobe.decide.candidates import SIMPLER_FIRST, candidates
from gpuprobe.decide.rank import rank
from gpuprobe.decide.search import base_rate, offered, search_candidates
from gpuprobe.errors import UserError
from gpuprobe.perf.costmodel import Link, Profile
from gpuprobe.perf.metrics import Slo

# --link: per-direction bandwidth and a one-way latency. NVLink 4 (H100/H200): 900 GB/s both
# directions together; InfiniBand NDR: 400 Gb/s; RoCE: a 200 GbE port; TCP: what one stream
# gets on 25 GbE. Assumptions beside the datasheets, as the roofline's are.
LINKS = {"nvlink": Link(10e-6, 450e9, "--link nvlink"), "ib": Link(20e-6, 50e9, "--link ib"),
         "roce": Link(30e-6, 25e9, "--link roce"), "tcp": Link(100e-6, 3e9, "--link tcp")}
OFFERED_TOP = 3  # candidates that also get their figures at the workload's own rate


def recommend(workload_df: pd.DataFrame, profile: Profile, slo: Slo, devices: int = 1,
              link: str | float | None = None, cost_per_device_hour: float | None = None,
              evidence_store=None, progress: Callable[[str], None] | None = None,
              layouts=SIMPLER_FIRST, seed: int | None = 0, workload_name: str | None = None) -> dict:
    """The recommendation as plain JSON-ready data (keys in the module docs of
    gpuprobe.decide). workload_df: arrival_s, prompt_tokens, output_tokens (any order);
    devices: how many the deployment has (cross xPyD fits within them); link: 'nvlink', 'ib',
    'roce', 'tcp' or GB/s for cross's KV link (default: the profile's); evidence_store: a
    Store to read GPU counters and validate results from. UserError on bad input, also when
    no candidate meets the SLO at any rate (naming the closest and by how much)."""
    t0 = time.perf_counter()
    wl = prepare(workload_df)
    if len(wl) < 2:  # one request has no rate to search: every "rate" would read 0% met
        raise UserError("the workload has 1 request: recommend needs at least 2 to search the "
                        "rate each layout sustains (raise --limit)")
    if devices < 1:
        raise UserError(f"--devices must be at least 1, got {devices}")
    check_model(profile, wl)
    profile = with_link(profile, link)
    cands = candidates(devices, layouts)
    if not cands:
        raise UserError(f"no candidate layout fits {devices} device(s) with layouts {', '.join(layouts)}")
    rows = search_candidates(wl, profile, cands, slo, progress, seed)
    ranked = rank(rows)
    by_label = {c.label: c for c in cands}
    if not ranked[0]["meets_slo"]:
        raise UserError(impossible(ranked, slo))
    for r in ranked[:OFFERED_TOP]:
        r["at_offered"] = offered(wl, profile, by_label[r["label"]], slo, devices, seed)
    best = ranked[0]
    runner = ranked[1] if len(ranked) > 1 else None
    other = next((r for r in ranked[1:] if r["layout"] != best["layout"]), None)
    margin, margin_layout = _margin(best, runner), _margin(best, other)
    reasons = build_reasons(wl, profile, slo, best, runner, other, margin, evidence_store)
    conf = confidence(profile, margin_layout, reasons)
    out = {
        "layout": best["layout"], "label": best["label"], "params": best["params"],
        "devices": devices, "units": devices // best["devices"],
        "max_goodput_rps_per_device": best["max_goodput_rps_per_device"],
        "candidates": ranked, "margin": margin, "margin_over_other_layout": margin_layout,
        "runner_up": runner["label"] if runner else None,
        "confidence": conf, "reasons": reasons, "slo": slo.to_dict(),
        "profile": {"name": profile.name, "meta": profile.meta,
                    "confidence": profile.confidence(tuple(layouts))},
        "workload": {"name": workload_name, "requests": int(len(wl)), "rate_rps": base_rate(wl),
                     "span_s": float(wl["arrival_s"].iloc[-1]),
                     **wl.attrs.get("gpuprobe_scaled", {})},
        "search": {"seconds": time.perf_counter() - t0, "candidates": len(rows),
                   "simulations": sum(r["simulations"] for r in rows),
                   "sample_requests": max(r["search_requests"] for r in rows)},
    }
    if cost_per_device_hour is not None:
        out["cost_per_device_hour"] = cost_per_device_hour
        out["cost_per_million_output_tokens"] = cost_per_million(
            cost_per_device_hour, best["max_goodput_rps_per_device"], wl)
        for r in ranked:
            r["cost_per_million_output_tokens"] = cost_per_million(
                cost_per_device_hour, r["max_goodput_rps_per_device"], wl)
    out["decision"] = sentence(out, slo)
    return out


def prepare(workload_df: pd.DataFrame) -> pd.DataFrame:
    """Sorted by arrival, clock from 0, index reset; UserError when empty or lacking columns."""
    need = ("arrival_s", "prompt_tokens", "output_tokens")
    missing = [c for c in need if c not in workload_df.columns]
    if missing:
        raise UserError(f"workload lacks column(s) {', '.join(missing)}")
    if workload_df.empty:
        raise UserError("workload is empty: it has no requests")
    wl = workload_df.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    wl = wl.assign(arrival_s=wl["arrival_s"] - wl["arrival_s"].iloc[0])
    wl.attrs = dict(workload_df.attrs)
    return wl


def scale_workload(wl: pd.DataFrame, rate_scale: float = 1.0, prompt_scale: float = 1.0,
                   token_scale: float = 1.0, limit: int | None = None) -> pd.DataFrame:
    """What-if: the first `limit` requests, rate_scale times as many per second (same burst
    shape), prompts prompt_scale times longer, every length token_scale times (at least 1)."""
    wl = wl.sort_values("arrival_s", kind="stable").iloc[:limit]
    if wl.empty:
        raise UserError("workload is empty: it has no requests")
    p = np.maximum(np.round(wl["prompt_tokens"].to_numpy() * prompt_scale * token_scale), 1)
    o = np.maximum(np.round(wl["output_tokens"].to_numpy() * token_scale), 1)
    out = wl.assign(arrival_s=(wl["arrival_s"] - wl["arrival_s"].iloc[0]) / rate_scale,
                    prompt_tokens=p.astype(np.int64), output_tokens=o.astype(np.int64))
    out.attrs["gpuprobe_scaled"] = {"rate_scale": rate_scale, "prompt_scale": prompt_scale,
                                    "token_scale": token_scale, "limit": limit}
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
    """'no candidate meets these SLOs; X comes closest ...' from rows where none met."""
    def gap(r):
        a = r["at_goodput"]
        return -(a.get("slo_attainment") or 0.0)
    closest = min(ranked, key=gap)
    a = closest["at_goodput"]
    ttft, tbt = a.get("ttft_p99_s"), a.get("tbt_p99_s")
    return (f"no candidate meets these SLOs ({_slo_text(slo)}) at any rate; {closest['label']} comes "
            f"closest even at the lowest rate tried: {a.get('slo_attainment') or 0:.0%} of requests "
            f"met (target {slo.attain:.0%}), TTFT p99 {_num(ttft)} s against {slo.ttft_s:g} s, TBT p99 "
            f"{_num(tbt)} s against {slo.tbt_s:g} s")


def _num(v) -> str:
    return "n/a" if v is None or v != v else f"{v:.3g}"


def _slo_text(slo: Slo) -> str:
    return slo.describe()


def _margin(best: dict, other: dict | None) -> float | None:
    if other is None:
        return None
    g, h = best["max_goodput_rps_per_device"], other["max_goodput_rps_per_device"]
    return (g - h) / h if h > 0 else None


def build_reasons(wl, profile, slo, best, runner, other, margin, store) -> list[dict]:
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
    for extra in (why.counter_reason(store), why.validate_reason(store, profile)):
        if extra:
            out.append(extra)
    return out


def confidence(profile: Profile, margin_layout: float | None, reasons: list[dict]) -> dict:
    """0-1 and a word: a measured profile and a wide margin over the best other layout make it
    high; a spec-sheet profile, a thin margin or a validate run that missed its bar lower it."""
    measured = profile.confidence(SIMPLER_FIRST)["level"] == "high"
    value = 0.85 if measured else 0.55
    m = 0.2 if margin_layout is None else max(0.0, margin_layout)
    value *= 0.5 + 0.5 * min(1.0, m / 0.2)
    v = next((r["evidence"] for r in reasons if "bar_met" in r["evidence"]), None)
    if v is not None and v.get("bar_met") is not None:
        value = min(0.95, value + 0.1) if bool(v["bar_met"]) else value * 0.8
    word = "high" if value >= 0.7 else "medium" if value >= 0.45 else "low"
    return {"value": round(value, 3), "word": word,
            "basis": ("measured profile" if measured else "profile not (fully) measured") +
                     (f", {m:.0%} margin over the best other layout")}


def cost_per_million(price_per_device_hour: float, goodput_rps_per_device: float,
                     wl: pd.DataFrame) -> float | None:
    """USD per million output tokens at the goodput: the device-hour over the output tokens a
    device serves in an hour within the SLO."""
    tok_per_s = goodput_rps_per_device * float(wl["output_tokens"].mean())
    return price_per_device_hour / (tok_per_s * 3600.0) * 1e6 if tok_per_s > 0 else None


def sentence(rec: dict, slo: Slo) -> str:
    m, mo = rec["margin"], rec["margin_over_other_layout"]
    tail = f", {m:.0%} over {rec['runner_up']}" if m is not None else ""
    if m is not None and m < 0.05:  # within the search's resolution: won on TBT or simplicity
        tail = f", tied on goodput with {rec['runner_up']} and ahead on p99 TBT or simplicity"
    other = next((c["label"] for c in rec["candidates"] if c["layout"] != rec["layout"]), None)
    if mo is not None and other != rec["runner_up"]:
        tail += f" and {mo:.0%} over the best other layout ({other})"
    cost = rec.get("cost_per_million_output_tokens")
    price = f", ${cost:.3g} per million output tokens" if cost else ""
    return (f"Run {rec['label']} on {rec['devices']} device(s): {rec['max_goodput_rps_per_device']:.3g} "
            f"req/s per device within the {slo.name} SLO ({_slo_text(slo)}){tail}{price} "
            f"(confidence {rec['confidence']['word']}).")
