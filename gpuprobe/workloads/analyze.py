"""Phase-mix analysis of a workload: how much of the work is prefill, bucket by bucket.

    mix = analyze(df, bucket_s=10.0)     # df: arrival_s, prompt_tokens, output_tokens[, hash_ids]
    mix.buckets                          # one row per bucket (columns below)
    mix.summary["prompt_output_ratio"]   # total prompt tokens / total output tokens

Tokens are attributed to the bucket the request arrives in (prefill happens then; decode follows
within seconds, short beside a 10 s bucket). Concurrent decodes are estimated with Little's law:
decodes in flight = decode tokens/s x seconds per decode token (`decode_tbt_s`, default 30 ms,
an assumption stated in the summary; pass a measured TBT when there is one).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from gpuprobe.errors import UserError
from gpuprobe.units import whole_buckets
from gpuprobe.workloads.changepoints import change_points

DEFAULT_DECODE_TBT_S = 0.030
BLOCK_TOKENS = 512
MAX_BUCKETS = 100_000  # beyond this the table and its JSON run to gigabytes


@dataclass(frozen=True)
class MixAnalysis:
    """buckets columns: start_s, num_requests, requests_per_s, prefill_tokens_per_s,
    decode_tokens_per_s, prefill_token_share (NaN for empty buckets), prompt_tokens_p50/p90,
    output_tokens_p50/p90, concurrent_decodes_est. change_points_s: bucket start times (s from
    the first request) where the prefill share shifts."""
    buckets: pd.DataFrame
    summary: dict
    change_points_s: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {**self.summary, "change_points_s": self.change_points_s,
                "buckets": json.loads(self.buckets.to_json(orient="records"))}


def prefix_reuse(hash_ids) -> float | None:
    """Fraction of 512-token prompt blocks whose hash was seen in an earlier request (an upper
    bound on what a prefix cache with unlimited room could reuse); None without hash ids."""
    seen: set = set()
    total = reused = 0
    for text in hash_ids:
        if text is None or (isinstance(text, float) and np.isnan(text)):
            continue
        ids = json.loads(text) if isinstance(text, str) else list(text)
        reused += sum(1 for h in ids if h in seen)
        total += len(ids)
        seen.update(ids)
    return reused / total if total else None


def _bucket_table(df: pd.DataFrame, bucket_s: float, tbt_s: float) -> pd.DataFrame:
    b = np.floor(df["arrival_s"].to_numpy(dtype=float) / bucket_s).astype(np.int64)
    g = df.assign(bucket=b).groupby("bucket")
    out = pd.DataFrame({"num_requests": g.size(), "prompt_sum": g["prompt_tokens"].sum(),
                        "output_sum": g["output_tokens"].sum(),
                        "prompt_tokens_p50": g["prompt_tokens"].quantile(0.5),
                        "prompt_tokens_p90": g["prompt_tokens"].quantile(0.9),
                        "output_tokens_p50": g["output_tokens"].quantile(0.5),
                        "output_tokens_p90": g["output_tokens"].quantile(0.9)})
    full = range(int(b.min()), int(b.max()) + 1) if len(b) else range(0)
    out = out.reindex(full)
    out[["num_requests", "prompt_sum", "output_sum"]] = out[["num_requests", "prompt_sum", "output_sum"]].fillna(0)
    tokens = out["prompt_sum"] + out["output_sum"]
    table = pd.DataFrame({
        "start_s": np.asarray(full, dtype=float) * bucket_s,
        "num_requests": out["num_requests"].astype(int).to_numpy(),
        "requests_per_s": (out["num_requests"] / bucket_s).to_numpy(),
        "prefill_tokens_per_s": (out["prompt_sum"] / bucket_s).to_numpy(),
        "decode_tokens_per_s": (out["output_sum"] / bucket_s).to_numpy(),
        "prefill_token_share": (out["prompt_sum"] / tokens.where(tokens > 0)).to_numpy()})
    for col in ("prompt_tokens_p50", "prompt_tokens_p90", "output_tokens_p50", "output_tokens_p90"):
        table[col] = out[col].to_numpy()
    table["concurrent_decodes_est"] = table["decode_tokens_per_s"] * tbt_s
    return table


def _whole(table: pd.DataFrame, df: pd.DataFrame, bucket_s: float) -> tuple[pd.DataFrame, dict]:
    """The table without its last bucket when the workload ends inside it (its rate over the whole
    bucket would read low: 21.7 s of requests divided by 60), and the seconds left out. A workload
    shorter than one bucket keeps its one bucket."""
    none = {"tail_s_not_bucketed": 0.0, "tail_requests_not_bucketed": 0}
    if len(table) < 2:
        return table, none
    last = float(df["arrival_s"].max())
    end = float(table["start_s"].iloc[-1])
    if whole_buckets(last, bucket_s) * bucket_s > end:  # the last bucket is whole
        return table, none
    return table.iloc[:-1].reset_index(drop=True), {
        "tail_s_not_bucketed": last - end, "tail_requests_not_bucketed": int(table["num_requests"].iloc[-1])}


def _check_buckets(arrival_s: np.ndarray, bucket_s: float) -> None:
    """Refuse more than MAX_BUCKETS buckets (there are at most span / bucket_s + 2)."""
    span = float(arrival_s.max() - arrival_s.min()) if arrival_s.size else 0.0
    if span / bucket_s > MAX_BUCKETS - 2:
        least = math.ceil(span / (MAX_BUCKETS - 2) * 1000) / 1000  # whole ms, rounded up
        raise UserError(f"--bucket: {bucket_s:g} s cuts a {span:,.0f} s workload into more than {MAX_BUCKETS:,} "
                        f"buckets; use a larger --bucket (at least {least:g}s)")


def analyze(df: pd.DataFrame, bucket_s: float = 10.0, decode_tbt_s: float | None = None) -> MixAnalysis:
    """Bucketed phase mix of a workload DataFrame (arrival_s in seconds)."""
    if bucket_s <= 0:
        raise ValueError("bucket_s must be positive")
    tbt = DEFAULT_DECODE_TBT_S if decode_tbt_s is None else decode_tbt_s
    _check_buckets(df["arrival_s"].to_numpy(dtype=float), bucket_s)
    table, tail = _whole(_bucket_table(df, bucket_s, tbt), df, bucket_s)
    share = table["prefill_token_share"]
    valid = share.notna().to_numpy()
    cps = [float(table["start_s"].to_numpy()[valid][i]) for i in change_points(share.to_numpy()[valid])]
    prompt_total, output_total = int(df["prompt_tokens"].sum()), int(df["output_tokens"].sum())
    hashes = df["hash_ids"] if "hash_ids" in df.columns else []
    summary = {
        "requests": int(len(df)), "bucket_s": bucket_s,
        "span_s": float(df["arrival_s"].max() - df["arrival_s"].min()) if len(df) else 0.0,
        "prompt_tokens_total": prompt_total, "output_tokens_total": output_total,
        "prompt_output_ratio": prompt_total / output_total if output_total else None,
        "prefill_token_share": prompt_total / (prompt_total + output_total) if prompt_total + output_total else None,
        "decode_tbt_s_assumed": tbt,
        "concurrent_decodes_est_mean": float(table["concurrent_decodes_est"].mean()) if len(table) else 0.0,
        "concurrent_decodes_est_max": float(table["concurrent_decodes_est"].max()) if len(table) else 0.0,
        "prefix_block_reuse": prefix_reuse(hashes),
        "prefix_block_tokens": BLOCK_TOKENS,
        **tail}
    return MixAnalysis(table, summary, cps)
