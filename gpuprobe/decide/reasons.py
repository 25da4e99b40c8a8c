"""Why the chosen layout: each reason a sentence tied to a figure ({text, evidence}).

The figures: the workload's prompt:output token ratio and how it moves over time (analyze),
how much a decode step slows when a prefill shares it (the profile's mixed-step factor and
the step it adds), the KV handoff against the TBT budget, the GPU counters in the store's
prefill-heavy and decode-heavy periods, and the last validate run's verdict.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from gpuprobe.perf.costmodel import Profile
from gpuprobe.perf.metrics import Slo
from gpuprobe.units import finite_number

COUNTERS = ("sm_util_pct", "dram_bw_util_pct", "tensor_util_pct")
MIX_BUCKET_S = 60.0


def ratio_reason(workload: pd.DataFrame) -> dict:
    """Prompt:output token ratio overall and its 10th-90th percentile over 60 s buckets."""
    from gpuprobe.workloads.analyze import analyze
    mix = analyze(workload, bucket_s=MIX_BUCKET_S)
    ratio = mix.summary["prompt_output_ratio"] or float("nan")
    b = mix.buckets
    per = (b["prefill_tokens_per_s"] / b["decode_tokens_per_s"]).replace([np.inf, -np.inf], np.nan).dropna()
    p10, p90 = (float(per.quantile(q)) for q in (0.1, 0.9)) if len(per) else (ratio, ratio)
    kind = "prefill-heavy" if ratio >= 1 else "decode-heavy"
    text = (f"prompt:output token ratio {ratio:.1f}:1 ({kind}); over {MIX_BUCKET_S:.0f} s buckets it "
            f"moves between {p10:.1f} and {p90:.1f} (p10-p90)")
    return {"text": text, "evidence": {"prompt_output_ratio": ratio, "ratio_p10": p10,
                                       "ratio_p90": p90, "bucket_s": MIX_BUCKET_S,
                                       "source": "analyze"}}


def mixed_step_reason(profile: Profile, workload: pd.DataFrame, slo: Slo) -> dict:
    """How long a decode step takes when a prefill of the median prompt shares it."""
    w = profile.worker("monolithic", "mixed")
    step = w.step_fn()
    prompt = int(np.median(workload["prompt_tokens"]))
    batch, ctx = 32, 32 * int(np.median(workload["prompt_tokens"] + workload["output_tokens"] // 2))
    alone = step(0, 0, batch, ctx)
    mixed = step(prompt, prompt * prompt, batch, ctx, 1)
    text = (f"a decode step of {batch} requests takes {alone * 1e3:.1f} ms alone and "
            f"{mixed * 1e3:.1f} ms when a median prompt ({prompt} tokens) is prefilled in it "
            f"(mixed-step factor {w.mixed_factor:.2f}, "
            f"{'assumed, not measured' if w.mixed_source == 'default' else w.mixed_source}); the TBT budget is "
            f"{slo.tbt_s * 1e3:.0f} ms")
    return {"text": text, "evidence": {"decode_step_s": alone, "mixed_step_s": mixed,
                                       "slowdown": mixed / alone if alone else None,
                                       "mixed_factor": w.mixed_factor,
                                       "mixed_source": w.mixed_source, "prompt_tokens": prompt,
                                       "decode_batch": batch, "tbt_budget_s": slo.tbt_s}}


def handoff_reason(profile: Profile, workload: pd.DataFrame, slo: Slo, layout: str) -> dict:
    """The KV handoff of a median and a p99 prompt over the split layout's link, against the
    TBT budget (the first gap of every split request holds one)."""
    lay = layout if layout in ("intra", "cross") else "cross"
    link = profile.link(lay)
    p50, p99 = (int(np.percentile(workload["prompt_tokens"], q)) for q in (50, 99))
    kvb = profile.kv_bytes_per_token
    s50, s99 = (link.seconds(kvb * p) for p in (p50, p99))
    text = (f"{lay}'s KV handoff ({link.bytes_per_s / 1e9:.3g} GB/s, {link.source}) takes "
            f"{s50 * 1e3:.2f} ms for a median prompt ({kvb * p50 / 1e6:.1f} MB) and "
            f"{s99 * 1e3:.2f} ms at p99: {s99 / slo.tbt_s:.0%} of the {slo.tbt_s * 1e3:.0f} ms "
            "TBT budget")
    if not kvb:  # 0 is a profile that did not say, not a free handoff
        text = (f"{lay}'s KV handoff cost is unknown: the profile holds no KV bytes per token (it "
                f"says 0), so its link ({link.bytes_per_s / 1e9:.3g} GB/s, {link.source}) cannot be "
                f"turned into time against the {slo.tbt_s * 1e3:.0f} ms TBT budget")
    return {"text": text, "evidence": {"layout": lay, "link_bytes_per_s": link.bytes_per_s,
                                       "link_source": link.source, "handoff_p50_s": s50,
                                       "handoff_p99_s": s99, "kv_bytes_per_token": kvb,
                                       "tbt_budget_s": slo.tbt_s}}


def counter_reason(store) -> dict | None:
    """The agent's GPU counters in the store, in the periods the server's requests were
    prefill-heavy (prefill share of tokens above its median, per 10 s) against the rest;
    None when the store has no such counters or no requests to tell the periods apart."""
    if store is None:
        return None
    have = [m for m in COUNTERS if m in set(store.metrics())]
    if not have:
        return None
    req = store.requests()
    if req.empty:
        return None
    bucket = np.floor(req["arrival_s"].to_numpy(dtype=float) / 10.0)
    tok = pd.DataFrame({"b": bucket, "p": req["prompt_tokens"].fillna(0),
                        "o": req["output_tokens"].fillna(0)}).groupby("b").sum()
    share = tok["p"] / (tok["p"] + tok["o"]).replace(0, np.nan)
    heavy = set(share[share > share.median()].index)
    ev: dict = {}
    for m in have:
        s = store.samples(m)
        if s.empty:
            continue
        b = np.floor(s["ts_s"].to_numpy(dtype=float) / 10.0)
        known = np.isin(b, share.index.to_numpy())
        is_heavy = np.isin(b, list(heavy))
        v = s["value"].to_numpy(dtype=float)
        ev[m] = {"prefill_heavy": _mean(v[known & is_heavy]), "decode_heavy": _mean(v[known & ~is_heavy])}
    ev = {k: x for k, x in ev.items() if not (math.isnan(x["prefill_heavy"]) and math.isnan(x["decode_heavy"]))}
    if not ev:
        return None
    parts = [f"{k} {x['prefill_heavy']:.0f}% vs {x['decode_heavy']:.0f}%" for k, x in ev.items()]
    return {"text": "GPU counters in prefill-heavy vs decode-heavy periods: " + ", ".join(parts),
            "evidence": {**ev, "bucket_s": 10.0, "source": "store samples (agent)"}}


def validate_reason(store, profile: Profile, workload: str | None = None,
                    layout: str | None = None) -> dict | None:
    """The last validate run's verdict: on `workload` where one ran on it, else the last for
    this profile, else the last of all. With `layout` (the chosen one), whether that run
    measured it best, with both figures (`agrees`, `comparison`; same_workload says whether
    the run was on this workload, the only case the confidence weighs a disagreement)."""
    from gpuprobe.decide.validate_evidence import compare_validation, last_validation
    if store is None:
        return None
    last = last_validation(store, workload) if workload else None
    same = last is not None
    if last is None:
        try:
            v = store.validations()
        except Exception:  # an older store without the table: nothing to say  # noqa: BLE001
            return None
        if v.empty:
            return None
        if "profile" in v.columns and profile.name in set(v["profile"].dropna()):
            v = v[v["profile"] == profile.name]
        row = v.iloc[-1]
        body = row.get("body")
        last = {"created_s": float(row.get("created_s") or 0), "workload": row.get("workload"),
                "best_measured": row.get("best_measured"), "best_predicted": row.get("best_predicted"),
                "bar_met": row.get("bar_met"), "device": row.get("device"),
                "body": json.loads(body) if isinstance(body, str) else (body or {})}
    body = last["body"]
    medians, worst = _p50_errors(body)
    text = (f"last validate ({last.get('workload')}, {last.get('device') or body.get('device') or 'cpu'}): "
            f"measured best {last.get('best_measured')}, predicted best {last.get('best_predicted')}")
    if medians:
        bar = body.get("bar")
        text += "; median p50 error " + ", ".join(f"{k} {v:.0%}" for k, v in medians.items())
        text += f" (bar {bar:.0%})" if finite_number(bar) else ""
    if worst:
        text += f"; largest {worst[0]} {worst[1]:+.0%}"
    cmp = compare_validation(layout, last) if layout else {}
    return {"text": text, "evidence": {"validation_created_s": last["created_s"],
                                       "best_measured": last.get("best_measured"),
                                       "best_predicted": last.get("best_predicted"),
                                       "bar_met": last.get("bar_met"),
                                       "median_p50_error": medians,
                                       "largest_error": list(worst) if worst else None,
                                       "same_workload": same, "agrees": cmp.get("agrees"),
                                       "comparison": cmp.get("text")}}


def _p50_errors(body: dict) -> tuple[dict, tuple[str, float] | None]:
    """From a validate body: each layout's median p50 error (summary) and the largest p50
    error of a row, as ('layout metric', relative error). The p50s are what the bar judges."""
    summary = body.get("summary") if isinstance(body.get("summary"), dict) else {}
    medians = {k: float(v["median_abs_rel_error_p50"]) for k, v in summary.items()
               if isinstance(v, dict) and finite_number(v.get("median_abs_rel_error_p50"))}
    rows = [r for r in body.get("rows") or [] if isinstance(r, dict)
            and finite_number(r.get("rel_error")) and "p50" in str(r.get("metric"))]
    worst = max(rows, key=lambda r: abs(r["rel_error"]), default=None)
    return medians, (f"{worst.get('layout')} {worst['metric']}", float(worst["rel_error"])) \
        if worst else None


def _mean(v: np.ndarray) -> float:
    return float(np.mean(v)) if len(v) else float("nan")
