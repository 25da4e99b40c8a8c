"""The autopilot's inputs, behind one adapter: the SLO, the window it reads, the forecast of
the next interval as a workload frame, and the candidates' predictions.

The forecaster (`gpuprobe.forecast`), the recommender and its SLO parser
(`gpuprobe.decide.recommend`, `gpuprobe.decide.slo`, `gpuprobe.decide.forecast_workload`) are
used when they are installed; until then two stand-ins keep the loop whole, each marked in
what it returns (`source`): the last window as the next interval's workload (a persistence
forecast), and `simulate` of the three layouts at the window's rate, ranked by goodput per
device among those that meet the attainment target. Nothing else in gpuprobe/autopilot/ knows
which one ran.
"""
from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuprobe.errors import UserError

FALLBACK_SHARE = 0.5  # the split layouts' prefill share the fallback candidates name


def _have(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@dataclass(frozen=True)
class FallbackSlo:
    ttft_s: float
    tbt_s: float
    attain: float = 0.9

    def to_dict(self) -> dict:
        return {"ttft_p99_s": self.ttft_s, "tbt_p99_s": self.tbt_s, "attain": self.attain,
                "source": "autopilot fallback parser"}


def parse_slo(text: str | None):
    """`--slo`: the recommender's parser when installed, else ttft=..,tbt=..,attain=.."""
    if _have("gpuprobe.decide.slo"):
        from gpuprobe.decide.slo import parse_slo as real
        return real(text or "chat")
    from gpuprobe.units import parse_duration
    if not text:
        return FallbackSlo(2.0, 0.1, 0.9)
    vals = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip().split("_")[0]
        if not sep or name not in ("ttft", "tbt", "attain"):
            raise UserError(f"--slo: {part!r} is not ttft_p99=DUR, tbt_p99=DUR or attain=FRACTION "
                            f"(presets need gpuprobe.decide.slo)")
        if name == "attain":
            try:
                vals[name] = float(value)
            except ValueError:
                raise UserError(f"--slo: attain={value!r} is not a number") from None
            if not 0 < vals[name] <= 1:
                raise UserError(f"--slo: attain={value} is not in (0, 1]")
        else:
            vals[name] = parse_duration(value.strip(), f"--slo {name}")
    return FallbackSlo(vals.get("ttft", 2.0), vals.get("tbt", 0.1), vals.get("attain", 0.9))


def slo_dict(slo) -> dict:
    return slo.to_dict() if hasattr(slo, "to_dict") else dict(vars(slo))


def window_workload(requests: pd.DataFrame) -> pd.DataFrame:
    """The server's request rows -> a workload frame (arrival_s from the first, lengths)."""
    df = requests[requests["status"].fillna("ok") == "ok"] if "status" in requests else requests
    df = df.sort_values("arrival_s")
    t0 = float(df["arrival_s"].iloc[0]) if len(df) else 0.0
    return pd.DataFrame({"arrival_s": df["arrival_s"].to_numpy(float) - t0,
                         "prompt_tokens": df["prompt_tokens"].to_numpy(np.int64),
                         "output_tokens": np.maximum(df["output_tokens"].fillna(1).to_numpy(np.int64), 1)})


def forecast_next(window_df: pd.DataFrame, window_s: float, horizon_s: float) -> tuple[pd.DataFrame, dict]:
    """(the next interval's workload frame, a summary of the forecast for the audit log)."""
    rate = len(window_df) / window_s if window_s > 0 else 0.0
    summary = {"window_s": window_s, "horizon_s": horizon_s, "window_requests": len(window_df),
               "requests_per_s": rate,
               "prefill_tokens_per_s": float(window_df["prompt_tokens"].sum()) / window_s,
               "decode_tokens_per_s": float(window_df["output_tokens"].sum()) / window_s}
    if _have("gpuprobe.forecast") and _have("gpuprobe.decide.forecast_workload"):
        from gpuprobe.decide.forecast_workload import workload_from_forecast
        from gpuprobe.forecast import forecast_workload
        bucket_s = max(window_s / 6.0, 0.5)
        f = forecast_workload(window_df, bucket_s=bucket_s, horizon_s=horizon_s)
        wl = workload_from_forecast(f, window_df)
        summary.update(source="gpuprobe.forecast", forecast=_forecast_means(f), span_s=horizon_s)
        return wl, summary
    summary.update(source="persistence (the last window as the next interval)", span_s=window_s)
    return window_df, summary


def _forecast_means(f: dict) -> dict:
    return {name: float(np.mean(s["mean"])) if len(s.get("mean", [])) else None
            for name, s in (f.get("series") or {}).items()}


def predict(workload_df: pd.DataFrame, profile, slo, horizon_s: float) -> dict:
    """{layout, params, candidates, source, ...}: candidates ranked best first, each with
    layout, params, predicted latencies, slo_attainment and goodput per device."""
    if _have("gpuprobe.decide.recommend"):
        from gpuprobe.decide.recommend import recommend
        rec = dict(recommend(workload_df, profile, slo, devices=2))
        rec["source"] = "gpuprobe.decide.recommend"
        return rec
    return _fallback_predict(workload_df, profile, slo, horizon_s)


def _fallback_predict(workload_df: pd.DataFrame, profile, slo, horizon_s: float) -> dict:
    from gpuprobe.perf.metrics import Slo
    from gpuprobe.perf.simulator import simulate
    from gpuprobe.perf.sim_layouts import DEVICES

    cands = []
    for i, layout in enumerate(("monolithic", "intra", "cross")):
        res = simulate(workload_df, profile, layout, Slo(slo.ttft_s, slo.tbt_s))
        r, s = res.requests, res.summary
        # A request meets the SLO when its TTFT and its longest gap do: a streaming user feels
        # the one stall a prefill puts into a decode step, which a mean gap would hide.
        met = r["ok"] & (r["ttft_s"] <= slo.ttft_s) & (r["tbt_max_s"].isna() | (r["tbt_max_s"] <= slo.tbt_s))
        att = float(met.mean()) if len(r) else 0.0
        cands.append({
            "layout": layout, "params": {} if layout == "monolithic" else {"prefill_share": FALLBACK_SHARE},
            "ttft_p99_s": _num(s.get("ttft_p99_s")), "tbt_p99_s": _num(s.get("tbt_p99_s")),
            "tbt_max_p99_s": _num(r["tbt_max_s"].quantile(0.99)) if len(r) else None,
            "slo_attainment": round(att, 4),
            "goodput_rps_per_device": round(float(met.sum()) / horizon_s / DEVICES[layout], 4),
            "simplicity": i})
    # Those meeting the attainment target first, by goodput per device, then by attainment;
    # ties go to the simpler layout.
    cands.sort(key=lambda c: (c["slo_attainment"] < slo.attain,
                              -c["goodput_rps_per_device"] if c["slo_attainment"] >= slo.attain
                              else -c["slo_attainment"], c["simplicity"]))
    best = cands[0]
    return {"layout": best["layout"], "params": best["params"], "candidates": cands,
            "source": "fallback: simulate the window, ranked by goodput per device "
                      "(gpuprobe.decide.recommend absent)"}


def _num(v, default=None):
    try:
        v = float(v)
    except (TypeError, ValueError):
        return default
    return v if math.isfinite(v) else default
