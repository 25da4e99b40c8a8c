"""The answer in plain words, from the stored Recommendation: the one place that writes it, for
the CLI (`recommend`'s `decision`), the dashboard's Overview and Recommend pages and the
report's page one.

    a = answer(rec, validation=last_validation(store, rec.workload_name))  # validate_evidence
    a.decision      # the sentence: layout, devices, goodput per device, SLO, margin, cost
    a.margin, a.slo, a.confidence, a.cost, a.changes, a.evidence, a.risk, a.next_step
    a.caveats       # figures the profile assumed (KV bytes 0, a default mixed-step factor)

Plain words first; flag names and JSON stay in `details` (the pages' "details").
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from gpuprobe.decide.validate_evidence import compare_validation, duration_words
from gpuprobe.errors import UserError
from gpuprobe.units import finite_number


@dataclass(frozen=True)
class Answer:
    decision: str                 # one sentence, what `recommend --json` calls `decision`
    layout: str                   # the deployment in words
    goodput: str                  # "5.77 req/s per device" or "at least 5.77 ..." (capped)
    margin: str                   # over the best other layout (not a sibling setting)
    margin_value: float | None    # the same, relative (0.45 = 45% more goodput per device)
    slo: str                      # the SLO in words
    confidence: str               # the word, the value and why
    cost: str                     # $ per million output tokens and where the price comes from
    changes: str                  # what would change the answer
    workload: str                 # the slice of the workload the decision was made on
    risk: str                     # the main risk, in a sentence
    next_step: str                # what to do next, in words (no command)
    evidence: str | None = None   # the last validate on the same workload, agreeing or not
    agrees: bool | None = None    # whether that validate measured the chosen layout best
    caveats: tuple = ()           # figures the profile assumed rather than measured
    details: dict = field(default_factory=dict)  # flag names, ids, raw figures


def answer(rec, validation: dict | None = None) -> Answer:
    """The Answer for Recommendation `rec`. validation: the last validate run on the same
    workload (last_validation's dict), to agree with the decision or say by how much it
    differs."""
    best = _best_row(rec)
    other = best_other(rec)
    ev = compare_validation(rec.layout, validation) if validation else None
    parts = {"layout": layout_words(rec.deployment), "goodput": goodput_words(rec, best),
             "margin": margin_words(rec, best, other), "slo": slo_words(rec.slo),
             "cost": cost_words(rec), "workload": slice_words(rec.workload)}
    conf = rec.confidence
    confidence = f"{conf.word or 'unknown'}" + (f" ({conf.value:.2f})" if conf.value is not None else "")
    confidence += f": {conf.basis}" if conf.basis else ""
    caveats = tuple(profile_caveats(rec))
    return Answer(decision=rec.decision or decision_sentence(rec), **parts,
                  margin_value=margin_over_other(rec, other), confidence=confidence,
                  changes=changes_words(rec, other), risk=main_risk(rec, ev, caveats),
                  next_step=next_step(rec, ev), evidence=(ev or {}).get("text"),
                  agrees=(ev or {}).get("agrees"), caveats=caveats,
                  details={"id": rec.id, "label": rec.label, "params": rec.deployment.params(),
                           "slo": rec.slo.to_dict(), "profile": rec.profile.get("name"),
                           "cost_basis": rec.cost_basis})


def decision_sentence(rec) -> str:
    """The sentence every reader shows: what to run, on how many devices, its goodput per
    device within the SLO, its margin over the best other layout, the cost, the confidence."""
    best, other = _best_row(rec), best_other(rec)
    cost = rec.cost_per_million_output_tokens
    price = (f"; ${cost:.3g} per million output tokens"
             + (" (list price assumed)" if rec.cost_assumed else "") if cost else "")
    return (f"Run {layout_words(rec.deployment)} on {_devices(rec.deployment)}: "
            f"{goodput_words(rec, best)} within the SLO ({slo_words(rec.slo)}), "
            f"{margin_words(rec, best, other)}{price}; confidence {rec.confidence.word or 'unknown'}.")


def layout_words(d) -> str:
    tp = f", each engine over {d.tp} devices (tensor parallel)" if d.tp > 1 else ""
    if d.layout == "monolithic":
        engine = "one engine per device" if d.tp == 1 else "one engine"
        return (f"monolithic ({engine}, whole prompts first{tp})" if not d.chunked_prefill_tokens
                else f"monolithic with chunked prefill ({d.chunked_prefill_tokens} tokens a step{tp})")
    if d.layout == "intra":
        part = "each device" if d.tp == 1 else "each engine's devices"
        return f"intra ({d.prefill_share:.0%} of {part} prefills, the rest decodes{tp})"
    sizes = ("" if d.prefill_tp == d.decode_tp == 1 else
             f" of {d.prefill_tp} and {d.decode_tp} devices (tensor parallel)")
    return (f"cross {d.num_prefill}P{d.num_decode}D ({d.num_prefill} prefill and {d.num_decode} "
            f"decode workers{sizes}, the KV cache sent between them)")


def _devices(d) -> str:
    n = d.devices
    if d.replicas == 1:
        return f"{n} device{'s' if n != 1 else ''}"
    if d.unit.devices == 1:
        return f"{n} devices, one engine each"
    return f"{n} devices, {d.replicas} copies of {d.unit.devices}"


def goodput_words(rec, best: dict | None) -> str:
    g = rec.max_goodput_rps_per_device
    if g is None:
        return "goodput unknown"
    at_least = "at least " if best and best.get("capped") else ""
    return f"{at_least}{g:.3g} req/s per device"


def best_other(rec) -> dict | None:
    """The best candidate of another layout than the chosen one (the ranked rows)."""
    return next((c for c in rec.candidates if c.get("layout") != rec.layout), None)


def margin_words(rec, best: dict | None, other: dict | None) -> str:
    """The goodput per device over the best other layout; a lower bound where the chosen one
    reached the search's limit, unknown where both did."""
    if other is None:
        return "no other layout was weighed"
    og = other.get("max_goodput_rps_per_device") or 0.0
    name = f"the best other layout, {_label(other)} ({og:.3g} req/s per device)"
    m = margin_over_other(rec, other)
    capped = bool(best and best.get("capped"))
    if capped and other.get("capped"):
        return f"more than {name}, both at the search's limit"
    if m is None:
        return f"against {name}, which met the SLO at no rate" if og <= 0 else f"against {name}"
    if m < 0.05:
        return f"tied on goodput with {name} (within the search's 5%) and chosen {_tie_break(best, other)}"
    return f"{'at least ' if capped else ''}{m:.0%} more than {name}"


def _tie_break(best: dict | None, other: dict) -> str:
    """Why the chosen one wins a goodput tie: the rank rule's next keys, said with figures."""
    from gpuprobe.perf.metrics import TBT_TOLERANCE
    t, u = ((c or {}).get("tbt_p99_s") for c in (best, other))
    if finite_number(t) and finite_number(u) and t < u / (1 + TBT_TOLERANCE):
        return f"for its lower p99 time between tokens ({duration_words(t)} against {duration_words(u)})"
    return "as the simpler layout to run"


def margin_over_other(rec, other: dict | None) -> float | None:
    """Goodput per device over the best other layout, relative: as stored, else (rows
    written before it was) from the candidates."""
    if rec.margin_over_other_layout is not None or other is None:
        return rec.margin_over_other_layout
    og, g = other.get("max_goodput_rps_per_device"), rec.max_goodput_rps_per_device
    return (g - og) / og if og and g is not None and og > 0 else None


def _label(c: dict) -> str:
    return c.get("label") or c.get("layout") or "?"


def slo_words(slo) -> str:
    """The SLO's fields in words (a field this code does not know is named as it is)."""
    tpot = slo.tpot_s
    words = (f"{slo.attain:.0%} of requests get a first token within {duration_words(slo.ttft_s)} and then "
             f"a token every {duration_words(tpot)} on average")
    extra = []
    if slo.ttft_pct is not None:
        extra.append(f"first token at p{slo.ttft_pct} within {duration_words(slo.ttft_s)}")
    if getattr(slo, "tpot_pct", None) is not None:
        extra.append(f"time per output token at p{slo.tpot_pct} within {duration_words(tpot)}")
    if getattr(slo, "itl_s", None) is not None:
        extra.append(f"every gap between tokens at p{slo.itl_pct} within {duration_words(slo.itl_s)}")
    known = {"ttft_s", "tpot_s", "attain", "ttft_pct", "tpot_pct", "itl_s", "itl_pct", "name"}
    for f in fields(slo):  # targets a newer Slo holds, named by their field
        v = getattr(slo, f.name)
        if f.name not in known and f.name.endswith("_s") and isinstance(v, (int, float)):
            pct = getattr(slo, f.name[:-2] + "_pct", None)
            extra.append(f"{f.name[:-2].upper()}{f' at p{pct}' if pct else ''} within {duration_words(v)}")
    return words + ("; " + ", ".join(extra) if extra else "")


def cost_words(rec) -> str:
    c = rec.cost_per_million_output_tokens
    if rec.cost_per_device_hour is None:
        return "not priced (this recommendation was stored without a price)"
    if c is None:
        return "no cost: the chosen layout served no tokens within the SLO"
    return f"${c:.3g} per million output tokens ({rec.cost_basis or 'price given'})"


def slice_words(w: dict) -> str:
    """The slice of the workload a decision was made on, e.g. 'the first 40 requests of
    azure-conv, lengths x0.05, at 1 req/s'."""
    name = w.get("name") or "the workload"
    n = w.get("requests")
    what = f"the first {n} requests of {name}" if w.get("limit") else f"{n} requests of {name}"
    scales = []
    if (w.get("token_scale") or 1) != 1:
        scales.append(f"lengths x{w['token_scale']:g}")
    if (w.get("prompt_scale") or 1) != 1:
        scales.append(f"prompts x{w['prompt_scale']:g}")
    rate = w.get("rate_rps")
    if rate:
        scales.append(f"at {rate:.3g} req/s")
    return ", ".join([what, *scales])


def changes_words(rec, other: dict | None) -> str:
    m = margin_over_other(rec, other)
    if other is None or m is None:
        return "Weighing more layouts or devices could change it."
    if m < 0.05:
        return (f"It is a tie with {_label(other)}: any error in the model, or a change in "
                f"the mix, can swap them.")
    return (f"It changes if {_label(other)} serves {m:.0%} more than predicted against the "
            f"chosen layout, if the SLO or the prompt:output mix moves, or with other devices.")


def profile_caveats(rec) -> list[str]:
    """What the decision's reasons rest on that the profile assumed: no KV bytes per token
    (the handoff then costs nothing, which is not a measurement) and a default mixed-step
    factor (interference assumed, not measured)."""
    out = []
    for r in rec.reasons:
        e = r.get("evidence") if isinstance(r, dict) else None
        if not isinstance(e, dict):
            continue
        if "kv_bytes_per_token" in e and not e.get("kv_bytes_per_token"):
            out.append("the KV cache's bytes per token are not in the profile (it says 0): what "
                       "handing the KV cache over costs is unknown, not zero")
        if e.get("mixed_source") == "default":
            out.append(f"how much a prefill slows the decodes sharing its step is assumed (a "
                       f"factor of {e.get('mixed_factor', 1.0):.2f}), not measured")
    return out


def main_risk(rec, ev: dict | None, caveats: tuple) -> str:
    if ev and ev.get("agrees") is False:
        return f"The measurement disagrees: {ev['text']}"
    m = margin_over_other(rec, best_other(rec))
    if m is not None and m < 0.05:
        return "The margin over the best other layout is within the search's resolution."
    if caveats:
        return "The profile assumed part of what the answer rests on: " + "; ".join(caveats) + "."
    if rec.confidence.word in ("low", "medium"):
        return f"Confidence is {rec.confidence.word}: {rec.confidence.basis}."
    return "No specific risk in the evidence; watch p99 time between tokens after the switch."


def next_step(rec, ev: dict | None) -> str:
    if ev is None:
        return ("Measure the layouts on this workload before switching (validate), then switch "
                "one server and compare after an hour of traffic.")
    if ev.get("agrees") is False:
        return ("Measure again on the same slice and a measured profile before switching: the "
                "prediction and the measurement name different layouts.")
    if rec.applied_s:
        return ("It is applied: compare what the server measured since the switch with this "
                "prediction after an hour of traffic.")
    return "Switch one server to it, then compare what it measures with this prediction after an hour."


def _best_row(rec) -> dict | None:
    return next((c for c in rec.candidates if c.get("label") == rec.label), None)


class NoLayoutMeets(UserError):
    """No candidate meets the SLO at any rate. `answer` is the JSON answer (feasible false,
    the closest layout and by how much); the CLI exits 3 with it."""

    def __init__(self, answer: dict):
        super().__init__(answer["decision"])
        self.answer = answer


def infeasible(ranked: list[dict], slo) -> dict:
    """The answer when no candidate meets `slo`: the one that comes closest (the most
    requests within the SLO at the lowest rate tried) and how far it is from each target."""
    closest = max(ranked, key=lambda r: (r.get("at_goodput") or {}).get("slo_attainment") or 0.0)
    a = closest.get("at_goodput") or {}
    att = a.get("slo_attainment") or 0.0
    short = {"slo_attainment": att, "slo_attainment_target": slo.attain,
             "attainment_short_by": slo.attain - att}
    over = []
    for key, target, name in (("ttft_p99_s", slo.ttft_s, "TTFT p99"), ("tbt_p99_s", slo.tbt_s, "TBT p99")):
        v = a.get(key)
        if finite_number(v):
            short[key] = v
            short[f"{key[:-2]}_over_target"] = v / target - 1
            if v > target:
                over.append(f"{name} {duration_words(v)} against {duration_words(target)} ({v / target - 1:+.0%})")
    text = (f"No layout meets the SLO ({slo_words(slo)}) at any rate: {closest['label']} comes closest, "
            f"with {att:.0%} of requests within it at the lowest rate tried (target {slo.attain:.0%})"
            + (f"; {', '.join(over)}" if over else "") + ".")
    return {"feasible": False, "decision": text, "closest": {
        "label": closest["label"], "layout": closest["layout"], "params": closest.get("params")},
        "short_by": short, "slo": slo.to_dict(),
        "candidates": [{"label": r["label"], "slo_attainment": (r.get("at_goodput") or {}).get("slo_attainment")}
                       for r in ranked]}
