"""The phase mix from an engine's token counters in Prometheus, in analyze's bucket columns.

Prometheus has rates, not requests: each bucket's prefill and decode tokens/s are the rates of
the engines' prompt and generation token counters over the bucket (vLLM's `vllm:*`, SGLang's
`sglang:*`, else the agent's re-exported `gpuprobe_engine_*_tokens_per_s`, in that order, so
an engine scraped both directly and through its agent is counted once). requests_per_s counts
finished requests (the counters count finishes, not arrivals). Length quantiles need
requests, so those columns are NaN here.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprobe.errors import UserError
from gpuprobe.sources.promapi import PromApi, duration
from gpuprobe.workloads.analyze import DEFAULT_DECODE_TBT_S, MAX_BUCKETS
from gpuprobe.workloads.changepoints import change_points

# (column, counters in order of preference, the agent's gauge)
_RATES = (
    ("prefill_tokens_per_s", ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
     "gpuprobe_engine_prompt_tokens_per_s"),
    ("decode_tokens_per_s", ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
     "gpuprobe_engine_generation_tokens_per_s"),
    ("requests_per_s", ("vllm:request_success_total", "gpuprobe_requests_finished_total",
                        "sglang:num_requests_total"), "gpuprobe_engine_requests_finished_per_s"),
)
LENGTH_COLUMNS = ("prompt_tokens_p50", "prompt_tokens_p90", "output_tokens_p50", "output_tokens_p90")


def rate_expr(counters: tuple[str, ...], gauge: str, window_s: float, by: str | None) -> str:
    """sum by (group) of the first counter family present, else of the agent's gauge (only
    the gauge when `counters` is empty)."""
    grp = f" by ({by})" if by else ""
    w = duration(window_s)
    parts = [f"sum{grp} (rate({{__name__=\"{c}\"}}[{w}]))" for c in counters]
    parts.append(f"sum{grp} (avg_over_time({gauge}[{w}]))")
    return " or ".join(f"({p})" for p in parts)


def bucket_mix(api: PromApi, start_s: float, end_s: float, bucket_s: float,
               by: str | None = None, decode_tbt_s: float = DEFAULT_DECODE_TBT_S,
               agents_only: bool = False) -> pd.DataFrame:
    """One row per bucket (and group, when `by` names a label): start_s (s from start_s),
    ts_s (epoch), [group,] requests_per_s, prefill_tokens_per_s, decode_tokens_per_s,
    prefill_token_share, the length quantile columns (NaN), concurrent_decodes_est.
    A bucket without any engine data is absent for that group (missing, not zero).
    agents_only: read only the agents' re-exported rates, whose hostname, model and engine
    labels every group uses (an engine's own counters name its model `model_name`)."""
    if end_s <= start_s:
        raise UserError("--since/--until: the range is empty (until must be after since)")
    if (end_s - start_s) / bucket_s > MAX_BUCKETS:
        raise UserError(f"--bucket: {bucket_s:g} s cuts the range into more than {MAX_BUCKETS:,} buckets")
    cols: dict[tuple, dict] = {}
    for col, counters, gauge in _RATES:
        expr = rate_expr(() if agents_only else counters, gauge, bucket_s, by)
        for labels, ts, vals in api.query_range(expr, start_s + bucket_s, end_s, bucket_s):
            group = labels.get(by, "") if by else ""
            for t, v in zip(ts, vals):
                cols.setdefault((group, float(t) - bucket_s), {})[col] = v
    rows = [{"group": g, "ts_s": t, **v} for (g, t), v in sorted(cols.items())]
    df = pd.DataFrame(rows, columns=["group", "ts_s", *(c for c, _, _ in _RATES)])
    df.insert(0, "start_s", df["ts_s"] - start_s)
    tokens = df["prefill_tokens_per_s"] + df["decode_tokens_per_s"]
    df["num_requests"] = np.rint(df["requests_per_s"] * bucket_s)
    df["prefill_token_share"] = df["prefill_tokens_per_s"] / tokens.where(tokens > 0)
    for c in LENGTH_COLUMNS:
        df[c] = np.nan
    df["concurrent_decodes_est"] = df["decode_tokens_per_s"] * decode_tbt_s
    if not by:
        df = df.drop(columns="group")
    return df.reset_index(drop=True)


def mix_change_points(buckets: pd.DataFrame) -> list[float]:
    """Change points of the prefill share (bucket start, s from the range's start)."""
    share = buckets["prefill_token_share"]
    valid = share.notna().to_numpy()
    starts = buckets["start_s"].to_numpy()[valid]
    return [float(starts[i]) for i in change_points(share.to_numpy()[valid])]


def summary(buckets: pd.DataFrame, bucket_s: float, decode_tbt_s: float) -> dict:
    """analyze's summary keys that rates can give (token totals from the rates)."""
    prompt = float((buckets["prefill_tokens_per_s"].fillna(0) * bucket_s).sum())
    output = float((buckets["decode_tokens_per_s"].fillna(0) * bucket_s).sum())
    est = buckets["concurrent_decodes_est"]
    return {"requests": int(buckets["num_requests"].fillna(0).sum()), "bucket_s": bucket_s,
            "span_s": float(len(buckets) * bucket_s), "prompt_tokens_total": round(prompt),
            "output_tokens_total": round(output),
            "prompt_output_ratio": prompt / output if output else None,
            "prefill_token_share": prompt / (prompt + output) if prompt + output else None,
            "decode_tbt_s_assumed": decode_tbt_s,
            "concurrent_decodes_est_mean": float(est.mean()) if len(est) else 0.0,
            "concurrent_decodes_est_max": float(est.max()) if len(est) else 0.0,
            "prefix_block_reuse": None, "requests_counted": "finished"}
