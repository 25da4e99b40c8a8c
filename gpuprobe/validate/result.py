"""validate's result, JSON-ready: the compared rows, each side's best layout, the bar, and the
predictions without host effects beside their errors."""
from __future__ import annotations

from gpuprobe.perf.metrics import TBT_TOLERANCE, best_note, pick_best, tied_best
from gpuprobe.validate.verdict import BAR, COMPARED, compare, median_p50_error


def result_json(rows, predicted, measured, confidence, opts, capacity, rate, profile, wall_s, n,
                tolerance: float = TBT_TOLERANCE) -> dict:
    """The result's core: per layout the median p50 error and SLO attainment, the best layout
    measured and predicted (and the ties), whether the bar is met, the workload replayed
    (n requests at `rate`, replay_rate.ReplayRate) and the profile predicted from."""
    summary = {}
    for layout in predicted:
        summary[layout] = {"median_abs_rel_error_p50": median_p50_error(rows, layout),
                           "slo_attainment_predicted": predicted[layout]["slo_attainment"],
                           "slo_attainment_measured": measured[layout]["slo_attainment"]}
    best_m, best_p = pick_best(measured, tolerance), pick_best(predicted, tolerance)
    errors = [s["median_abs_rel_error_p50"] for s in summary.values()]
    out = {"rows": rows, "best_measured": best_m, "best_predicted": best_p,
           "tied_measured": tied_best(measured, tolerance),
           "tied_predicted": tied_best(predicted, tolerance), "tbt_tolerance": tolerance,
           "bar": BAR, "bar_met": best_m == best_p and all(e is not None and e <= BAR
                                                            for e in errors),
           "slo": opts.slo.to_dict(), "summary": summary, "confidence": confidence,
           "workload": {"num_requests": n, "token_scale": opts.token_scale,
                        "rate_rps": opts.rate_rps, "capacity_rps": capacity, **rate.info()},
           "wall_s": wall_s, "model": opts.model, "profile": profile.to_dict()}
    for name, summ in (("best_measured", measured), ("best_predicted", predicted)):
        if note := best_note(summ, out[name]):
            out.setdefault("notes", []).append(f"{name}: {note}")
    return out


def unadjusted(predicted: dict[str, dict], measured: dict[str, dict],
               tolerance: float = TBT_TOLERANCE) -> dict:
    """Predictions without host effects, with their errors, per layout."""
    rows = compare(predicted, measured)
    out = {}
    for layout in predicted:
        out[layout] = {"predicted": {m: predicted[layout].get(m) for m in COMPARED},
                       "median_abs_rel_error_p50": median_p50_error(rows, layout)}
    out["best_predicted"] = pick_best(predicted, tolerance)
    return out
