"""Page one: the decision memo. The recommendation in one sentence; against the baseline
(the layout running now, else a plain monolithic engine), the expected change in TTFT, TBT,
goodput, devices needed and cost per million output tokens, each with its uncertainty; the
main risks; what to do next. Figures come from the stored recommendation's candidates and
the last validate run; where one is missing the memo says so and gives no number.
"""
from __future__ import annotations

import math

import numpy as np

from gpuprobe.decide.prices import cost_per_million

METRICS = (("ttft_p99_s", "TTFT p99", "s"), ("tbt_p99_s", "TBT p99", "s"))


def baseline(cands: list[dict], current_layout: str | None) -> dict | None:
    """The candidate to compare with (cands: ranked, the recommendation's first): the current
    layout's best candidate, else monolithic's; where the recommendation keeps that layout
    (other settings), the best other layout's, since a sibling with the same figures would
    show no change and answer no question."""
    if not cands:
        return None
    chosen = cands[0].get("layout")
    for want in (current_layout, "monolithic"):
        if want and want != chosen:
            for c in cands[1:]:
                if c.get("layout") == want:
                    return c
    other = [c for c in cands[1:] if c.get("layout") != chosen]
    return other[0] if other else (cands[1] if len(cands) > 1 else None)


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


def memo(ev: dict) -> dict:
    """{'answer' (gpuprobe.decide.answer's, the same words as the CLI and the dashboard),
    'sentence', 'rows': [{what, baseline, recommended, change, uncertainty}], 'risks', 'next'
    (in words), 'commands' (for the details section), 'partial'} for page one."""
    rec = ev["recommendation"]
    if rec is None:
        return {"sentence": "No recommendation is stored for this workload yet: this report shows the "
                            "evidence only.", "rows": [], "risks": [], "answer": None, "commands": [
                                dict(ev["missing"])["recommendation"]],
                "next": ["Make a recommendation for this workload and write this report again."],
                "partial": True}
    from gpuprobe.decide.answer import answer
    a = answer(rec, _validation_for_answer(ev))
    cands = list(rec.candidates)
    best = cands[0] if cands else {}
    base = baseline(cands, ev.get("current_layout"))
    err_best = model_error(ev.get("validation"), best.get("layout", ""))
    err_base = model_error(ev.get("validation"), (base or {}).get("layout", ""))
    mean_out = float(np.mean(ev["lengths"]["output"]))
    rate = float(rec.workload.get("rate_rps") or ev["mix"]["summary"]["requests"]
                 / max(ev["mix"]["summary"]["span_s"], 1e-9))
    price = ev.get("cost_per_device_hour") or rec.cost_per_device_hour
    rows = []
    unc = _unc(err_best, err_base)
    for key, name, unit in METRICS:
        b = (base or {}).get("at_goodput", {}).get(key)
        r = best.get("at_goodput", {}).get(key)
        rows.append(_row(f"{name} at each layout's goodput", b, r, unit, unc))
    g_b, g_r = (base or {}).get("max_goodput_rps_per_device"), best.get("max_goodput_rps_per_device")
    bracket = best.get("goodput_bracket_rps_per_device") or [None, None]
    g_unc = (f"search bracket {bracket[0]:.3g}-{bracket[1]:.3g} req/s" if bracket[1] else "search bracket open")
    rows.append(_row("Goodput per device (req/s within SLO)", g_b, g_r, "req/s", g_unc + "; " + unc))
    d_b = devices_needed(rate, g_b or 0, int((base or {}).get("devices") or 1)) if base else None
    d_r = devices_needed(rate, g_r or 0, int(best.get("devices") or 1))
    d_lo = devices_needed(rate, bracket[1], int(best.get("devices") or 1)) if bracket[1] else None
    rows.append(_row(f"Devices that serve the decided load ({rate:.3g} req/s) within the SLO", d_b, d_r, "",
                     "n/a" if d_lo is None else f"{d_r} across the goodput bracket" if d_lo == d_r
                     else f"{d_lo}-{d_r} across the goodput bracket"))
    c_b, c_r = (priced(c, price, rec, mean_out) if c and price else None for c in (base, best))
    basis = (f"${price:g} per device-hour, as given" if ev.get("cost_per_device_hour")
             else rec.cost_basis or "price given")
    rows.append(_row("Cost per million output tokens", c_b, c_r, "$",
                     f"as goodput's; {basis}" if price else "not priced"))
    conf = rec.confidence.word or ""
    risks = [a.risk] + [r for r in _risks(ev, best, err_best, conf, rec.confidence.basis, rows) if r != a.risk]
    return {"answer": a, "sentence": a.decision, "rows": rows, "risks": risks, "next": [a.next_step],
            "commands": _commands(ev, rec, best), "confidence": conf,
            "baseline": (base or {}).get("label"), "recommended": best.get("label"),
            "baseline_why": _baseline_why(base, best, ev.get("current_layout"), bool(rec.applied_s)),
            "error_note": _error_note(err_best, err_base, ((ev.get("validation") or {}).get("body") or {}).get("model")),
            "partial": bool(ev["missing"])}


def priced(c: dict, price: float | None, rec, mean_out: float) -> float | None:
    """A candidate's $ per million output tokens at `price`: its stored cost rescaled (the
    cost is proportional to the price, and the stored one counts the decided slice's output
    lengths), else from its goodput and `mean_out`."""
    stored = c.get("cost_per_million_output_tokens")
    if not price:
        return stored
    if stored is not None and rec.cost_per_device_hour:
        return stored * price / rec.cost_per_device_hour
    return cost_per_million(price, c.get("max_goodput_rps_per_device"), mean_out)


def _validation_for_answer(ev: dict) -> dict | None:
    v = ev.get("validation")
    return None if v is None else {**v, "workload": ev["workload"]}


def _commands(ev: dict, rec, best: dict) -> list[str]:
    """The commands behind the next steps (the report's details section, not page one)."""
    out = [f"gpuprobe plan --recommendation {rec.id} --engine vllm --out plan/  (or sglang, dynamo): "
           f"the commands that run {best.get('label', rec.layout)}"]
    if rec.applied_s and rec.applied_target:
        out.append(f"gpuprobe recommend --check {rec.id}  (after an hour of traffic on {rec.applied_target})")
    else:
        out.append(f"gpuprobe apply --recommendation {rec.id} --target URL, then gpuprobe recommend "
                   f"--check {rec.id} after an hour of traffic")
    if ev.get("validation") is None:
        out.insert(0, f"gpuprobe validate --workload {ev['workload']}  (the model's error on this workload)")
    return out + [f"{cmd}  (fills: {what})" for what, cmd in ev["missing"]]


def _error_note(err_best: float | None, err_base: float | None, model: str | None = None) -> str:
    errs = [e for e in (err_best, err_base) if e is not None]
    on = f", on the {model} model" if model else ""
    return (f"±{max(errs):.0%} is the model's median error at p50 in the last validate run{on} (the larger of "
            f"the two layouts')" if errs else "no validate run measured the model's error on this workload")


def _baseline_why(base: dict | None, best: dict, current: str | None = None, applied: bool = False) -> str:
    if not base:
        return ""
    if current and base.get("layout") == current:
        when = "before this recommendation was applied" if applied else "on the target now"
        return f"the best {current} candidate ({current} ran {when})"
    if base.get("layout") == "monolithic" and best.get("layout") != "monolithic":
        return "the best plain monolithic engine, what most deployments run today"
    if base.get("layout") != best.get("layout"):
        return f"the best other layout ({base.get('layout')})"
    return "the runner-up"


def _unc(err_best: float | None, err_base: float | None) -> str:
    errs = [e for e in (err_best, err_base) if e is not None]
    return (f"±{max(errs):.0%} (model error)" if errs else "model error unknown (no validate run)")


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


def _risks(ev: dict, best: dict, err: float | None, conf: str, basis: str | None = None,
           rows: list | None = None) -> list[str]:
    out = []
    if conf in ("low", "medium"):
        why = basis or "the profile is not fully measured or the margin is thin"
        out.append(f"Confidence is {conf} ({why}): the ranking can change with a measured profile "
                   f"or a few percent of model error.")
    for r in rows or []:  # a figure the recommended layout makes worse is a trade-off to sign off
        if r["what"].startswith(("TTFT", "TBT")) and r["change"].endswith("%") and float(r["change"][:-1]) >= 10:
            out.append(f"{r['what'].split(' at ')[0]} rises from {r['baseline']} to {r['recommended']} "
                       f"({r['change']}): a trade-off to accept with this layout.")
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
