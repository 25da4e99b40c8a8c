"""The whole decision in one call, for every place that starts one (the CLI's recommend, the
fleet's per-group answers, the autopilot):

    rec = run_decision(workload_df, profile, slo, DecisionOptions(max_devices=2), store=store)

workload -> what-if scaling -> forecast (optional) -> search, ranking and reasons (recommend)
-> outlook over the forecast's horizon -> stored -> the Recommendation, with its id.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np
import pandas as pd

from gpuprobe.decide.candidates import SIMPLER_FIRST
from gpuprobe.decide.recommend import recommend
from gpuprobe.decide.recommendation import Recommendation, save_recommendation
from gpuprobe.decide.search import base_rate
from gpuprobe.errors import UserError
from gpuprobe.perf.costmodel import Profile
from gpuprobe.perf.metrics import Slo
from gpuprobe.workloads.loading import as_workload

FORECAST_METRICS = ("prefill_tokens_per_s", "decode_tokens_per_s", "requests_per_s")


@dataclass(frozen=True)
class WhatIf:
    """The workload as asked about: the first `limit` requests, at `rate` requests/s mean
    (None: its own) times rate_scale, prompts prompt_scale times longer, every length
    token_scale times (at least 1 token)."""

    rate: float | None = None
    rate_scale: float = 1.0
    prompt_scale: float = 1.0
    token_scale: float = 1.0
    limit: int | None = None


@dataclass(frozen=True)
class DecisionOptions:
    """What a decision weighs. forecast: one as `gpuprobe forecast --json` prints it;
    fit_forecast: (bucket_s, horizon_s) to fit one on the workload instead. Either way the
    layouts are weighed on the forecast load (its upper 80% of requests/s) and the outlook
    says when the best layout is expected to change."""

    max_devices: int = 1
    layouts: tuple = SIMPLER_FIRST
    link: str | float | None = None
    cost_per_device_hour: float | None = None
    what_if: WhatIf = field(default_factory=WhatIf)
    forecast: dict | None = None
    fit_forecast: tuple[float, float] | None = None
    seed: int | None = 0


def run_decision(workload_df: pd.DataFrame, profile: Profile, slo: Slo,
                 opts: DecisionOptions = DecisionOptions(), store=None,
                 workload_name: str | None = None,
                 progress: Callable[[str], None] | None = None) -> Recommendation:
    """The Recommendation for `workload_df` (arrival_s, prompt_tokens, output_tokens), stored
    in `store` when one is given (its id set; the store's counters and validate results are
    its evidence). UserError on bad input, NoLayoutMeets (gpuprobe.decide.answer) when no
    candidate meets the SLO at any rate; nothing is stored then."""
    wl = scale_workload(as_workload(workload_df), opts.what_if)
    forecast = opts.forecast
    if forecast is None and opts.fit_forecast is not None:
        from gpuprobe.forecast import forecast_workload
        bucket_s, horizon_s = opts.fit_forecast
        forecast = forecast_workload(wl, bucket_s, horizon_s, None, FORECAST_METRICS)
    if forecast is not None:
        from gpuprobe.decide.forecast_workload import workload_from_forecast
        wl = workload_from_forecast(wl, forecast, seed=opts.seed)
    rec = recommend(wl, profile, slo, devices=opts.max_devices, link=opts.link,
                    cost_per_device_hour=opts.cost_per_device_hour, evidence_store=store,
                    progress=progress, layouts=opts.layouts, seed=opts.seed,
                    workload_name=workload_name)
    if forecast is not None:
        from gpuprobe.decide.forecast_outlook import outlook
        rec = replace(rec, forecast=outlook(wl, forecast, profile, slo, rec, opts.seed))
    return save_recommendation(store, rec) if store is not None else rec


def scale_workload(wl: pd.DataFrame, what_if: WhatIf = WhatIf()) -> pd.DataFrame:
    """`wl` (as_workload's: sorted, the clock from 0) as `what_if` asks; the scales are kept
    in attrs['gpuprobe_scaled'] for the recommendation's workload record."""
    w = what_if
    wl = wl.iloc[:w.limit]
    if wl.empty:
        raise UserError("workload is empty: it has no requests")
    rate_scale = w.rate_scale
    if w.rate is not None:
        rate_scale *= w.rate / base_rate(wl)
    p = np.maximum(np.round(wl["prompt_tokens"].to_numpy() * w.prompt_scale * w.token_scale), 1)
    o = np.maximum(np.round(wl["output_tokens"].to_numpy() * w.token_scale), 1)
    out = wl.assign(arrival_s=(wl["arrival_s"] - wl["arrival_s"].iloc[0]) / rate_scale,
                    prompt_tokens=p.astype(np.int64), output_tokens=o.astype(np.int64))
    out.attrs = {**wl.attrs, "gpuprobe_scaled": {
        "rate_scale": rate_scale, "prompt_scale": w.prompt_scale, "token_scale": w.token_scale,
        "limit": w.limit}}
    return out
