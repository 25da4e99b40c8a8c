"""Page one: the decision memo. The recommendation in one sentence; against the baseline
(the layout running now, else a plain monolithic engine), the expected change in TTFT, TBT,
goodput, devices needed and cost per million output tokens, each with its uncertainty; the
main risks; what to do next. Figures come from the stored recommendation's candidates and
the last validate run; where one is missing the memo says so and gives no number.
"""
from __future__ import annotations

import math

import numpy as np

METRICS = (("ttft_p99_s", "TTFT p99", "s"), ("tbt_p99_s", "TBT p99", "s"))


def baseline(rec: dict, current_layout: str | None) -> dict | None:
    """The candidate to compare with: the current layout's best candidate, else monolithic's."""
    cands = rec.get("candidates") or []
    for want in (current_layout, "monolithic"):
        for c in cands:
            if want and c.get("layout") == want and c is not cands[0]:
                return c
    return cands[1] if len(cands) > 1 else None


def model_error(validation: dict | None, layout: str) -> float | None:
    """The last validate run's median relative error over this layout's p50 metrics (0.12 =
    12%), or None without a run. validate's JSON: summary[layout].median_abs_rel_error_p50,
    else rows of {layout, metric, rel_error}."""
    if not validation:
        return None
    body = validation.get("body") or {}
    summary = (body.get("summary") or {}).get(layout) or {}
    if summary.get("median_abs_rel_error_p50") is not None:
        return float(summary["median_abs_rel_error_p50"])
    errs = [abs(float(r["rel_error"])) for r in body.get("rows") or []
            if r.get("layout") == layout and str(r.get("metric", "")).endswith("_p50_s")
            and r.get("rel_error") is not None and math.isfinite(float(r["rel_error"]))]
    return float(np.median(errs)) if errs else None


def devices_needed(rate_rps: float, goodput_rps_per_device: float, unit: int) -> int | None:
    """Devices to serve rate_rps within the SLO, in whole deployment units."""
    if not goodput_rps_per_device or goodput_rps_per_device <= 0:
        return None
    n = math.ceil(rate_rps / goodput_rps_per_device)
    return max(unit, math.ceil(n / unit) * unit)


def cost_per_million(price: float | None, goodput_rps_per_device: float, mean_output: float) -> float | None:
    if not price or not goodput_rps_per_device:
        return None
    return price / 3600.0 / (goodput_rps_per_device * mean_output) * 1e6


def memo(ev: dict) -> dict:
    """{'sentence', 'rows': [{what, baseline, recommended, change, uncertainty}], 'risks',
    'next', 'partial'} for page one."""
    rec = ev["recommendation"]
    if rec is None:
        return {"sentence": "No recommendation is stored for this workload yet: this report shows the "
                            "evidence only.", "rows": [], "risks": [], "next": [
                                f"Run `{dict(ev['missing'])['recommendation']}` and write this report again."],
                "partial": True}
    body = rec.get("body") or {}
    cands = body.get("candidates") or rec.get("candidates") or []
    best = cands[0] if cands else {}
    base = baseline({"candidates": cands}, ev.get("current_layout"))
    err_best = model_error(ev.get("validation"), best.get("layout", ""))
    err_base = model_error(ev.get("validation"), (base or {}).get("layout", ""))
    mean_out = float(np.mean(ev["lengths"]["output"]))
    rate = float((body.get("workload") or {}).get("rate_rps") or ev["mix"]["summary"]["requests"]
                 / max(ev["mix"]["summary"]["span_s"], 1e-9))
    price = ev.get("cost_per_device_hour") or body.get("cost_per_device_hour")
    rows = []
    unc = _unc(err_best, err_base)
    for key, name, unit in METRICS:
        b = (base or {}).get("at_goodput", {}).get(key)
        r = best.get("at_goodput", {}).get(key)
        rows.append(_row(f"{name} at each layout's goodput", b, r, unit, unc))
    g_b, g_r = (base or {}).get("max_goodput_rps_per_device"), best.get("max_goodput_rps_per_device")
    bracket = best.get("goodput_bracket_rps_per_device") or [None, None]
    g_unc = (f"search bracket {bracket[0]:.3g}-{bracket[1]:.3g} req/s" if bracket[1] else "search bracket open")
    rows.append(_row("Goodput per device (req/s within SLO)", g_b, g_r, "req/s", g_unc + ("; " + unc if unc else "")))
    d_b = devices_needed(rate, g_b or 0, int((base or {}).get("devices") or 1)) if base else None
    d_r = devices_needed(rate, g_r or 0, int(best.get("devices") or 1))
    rows.append(_row(f"Devices for {rate:.3g} req/s", d_b, d_r, "", "from the goodput bracket: "
                     + (f"{devices_needed(rate, bracket[1], int(best.get('devices') or 1))}-{d_r}" if bracket[1] else "n/a")))
    c_b, c_r = (c.get("cost_per_million_output_tokens") or cost_per_million(price, c.get("max_goodput_rps_per_device"), mean_out)
                if c else None for c in (base, best))
    rows.append(_row("Cost per million output tokens", c_b, c_r, "$", "as goodput" if price else
                     "no --cost-per-device-hour given"))
    conf = rec.get("confidence_label") or (body.get("confidence") or {}).get("word", "")
    risks = _risks(ev, best, err_best, conf)
    nxt = [f"`gpuprobe plan --recommendation {rec['id']} --engine vllm --out plan/` (or sglang, dynamo) "
           f"to get the commands for {best.get('label', rec['layout'])}.",
           f"Apply on one host first: `gpuprobe apply --recommendation {rec['id']} --target URL`, then "
           f"`gpuprobe recommend --check {rec['id']}` after an hour of traffic."]
    if ev.get("validation") is None:
        nxt.insert(0, f"Measure the model's error on this workload: `gpuprobe validate --workload {ev['workload']}`.")
    sentence = body.get("decision") or f"Run {rec['layout']}."
    if base:
        sentence += f" Compared with {base.get('label', base.get('layout'))}."
    return {"sentence": sentence, "rows": rows, "risks": risks, "next": nxt, "confidence": conf,
            "baseline": (base or {}).get("label"), "recommended": best.get("label"),
            "partial": bool(ev["missing"])}


def _unc(err_best: float | None, err_base: float | None) -> str:
    errs = [e for e in (err_best, err_base) if e is not None]
    return (f"model error {max(errs):.0%} (median over p50s, last validate run)" if errs
            else "model error not measured on this workload (no validate run)")


def _row(what: str, b, r, unit: str, uncertainty: str) -> dict:
    change = (f"{(r - b) / b:+.0%}" if isinstance(b, (int, float)) and isinstance(r, (int, float)) and b
              else "n/a")
    return {"what": what, "baseline": _fmt(b, unit), "recommended": _fmt(r, unit), "change": change,
            "uncertainty": uncertainty}


def _fmt(v, unit: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if unit == "s":
        return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"
    if unit == "$":
        return f"${v:,.2f}"
    return f"{v:,.3g} {unit}".strip()


def _risks(ev: dict, best: dict, err: float | None, conf: str) -> list[str]:
    out = []
    if conf in ("low", "medium"):
        out.append(f"Confidence is {conf}: the profile is not fully measured or the margin is thin; "
                   f"the ranking can change with a measured profile.")
    if err is not None and err > 0.15:
        out.append(f"The model missed this layout by {err:.0%} at the median in the last validate run.")
    cps = ev["mix"]["change_points_s"]
    if cps:
        out.append(f"The prefill share of tokens shifted {len(cps)} time(s) in the trace; a layout fixed "
                   f"for one mix can lose when it moves (the forecast section says what is coming).")
    if best.get("layout") == "cross":
        out.append("Cross needs the KV cache shipped between devices: a slower link than profiled "
                   "raises TBT; keep prefill and decode on one NVLink domain where possible.")
    if best.get("layout") == "intra":
        out.append("Intra splits one GPU's SMs: it needs MPS or green contexts in production, "
                   "and one process fault takes both halves down.")
    if not out:
        out.append("No specific risk found in the evidence; watch p99 TBT after the switch.")
    return out
