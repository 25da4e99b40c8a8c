"""Fleet views: the hosts and GPUs a Prometheus sees, grouped by a label, with their counters
and phase mix.

    hosts = fleet_hosts(src, t0, t1, by="model")   # one row per host
    groups = fleet_groups(hosts)                    # one row per group

A host is a `hostname` label (each agent sets it; `gpuprobe agent --hostname`). Its group is
the value of `by` on any of its series: `model` and `engine` come from the engine series the
agent re-exports; any other label (a `host_group` set in prometheus.yml's target labels, say)
works the same. Means are over [t0, t1]; a host without a series has NaN there (missing, not
zero) and is still listed.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from gpuprobe.sources.promapi import duration
from gpuprobe.sources.prometheus import PrometheusSource

GPU_METRICS = ("sm_util_pct", "dram_bw_util_pct", "tensor_util_pct", "power_w")
HOST_METRICS = ("cpu_util_pct",)
ENGINE_METRICS = ("prompt_tokens_per_s", "generation_tokens_per_s", "requests_finished_per_s")


def _by_host(src: PrometheusSource, expr: str, at_s: float) -> dict[str, float]:
    return {labels.get("hostname", labels.get("instance", "")): v
            for labels, v in src.api.query(expr, at_s)}


def fleet_hosts(src: PrometheusSource, start_s: float, end_s: float, by: str = "model") -> pd.DataFrame:
    """Columns: host, group, num_gpus, then the range means: sm_util_pct,
    dram_bw_util_pct, tensor_util_pct, power_w (over the host's GPUs), cpu_util_pct,
    prefill_tokens_per_s, decode_tokens_per_s, requests_per_s (summed over its engines),
    prefill_token_share."""
    rng = duration(max(end_s - start_s, 1.0))
    names = '{__name__=~"gpuprobe_.+", hostname!=""}'
    hosts = sorted({h for h in _by_host(src, f"count by (hostname) (last_over_time({names}[{rng}]))", end_s)})
    groups: dict[str, str] = {}
    for labels, _ in src.api.query(f'group by (hostname, {by}) (last_over_time({{__name__=~"gpuprobe_.+", '
                                   f'hostname!="", {by}!=""}}[{rng}]))', end_s):
        groups.setdefault(labels.get("hostname", ""), labels.get(by, ""))
    cols: dict[str, dict[str, float]] = {}
    cols["num_gpus"] = _by_host(src, f"count by (hostname) (last_over_time(gpuprobe_gpu_mem_total_bytes[{rng}]))", end_s)
    for m in GPU_METRICS:
        cols[m] = _by_host(src, f"avg by (hostname) (avg_over_time(gpuprobe_gpu_{m}[{rng}]))", end_s)
    for m in HOST_METRICS:
        cols[m] = _by_host(src, f'avg by (hostname) (avg_over_time(gpuprobe_host_{m}{{device="cpu"}}[{rng}]))', end_s)
    for m, out in zip(ENGINE_METRICS, ("prefill_tokens_per_s", "decode_tokens_per_s", "requests_per_s")):
        cols[out] = _by_host(src, f"sum by (hostname) (avg_over_time(gpuprobe_engine_{m}[{rng}]))", end_s)
    rows = []
    for h in hosts:
        row = {"host": h, "group": groups.get(h, "")}
        for c, values in cols.items():
            row[c] = values.get(h, np.nan)
        rows.append(row)
    df = pd.DataFrame(rows, columns=["host", "group", *cols])
    df["num_gpus"] = df["num_gpus"].fillna(0).astype(int)
    tokens = df["prefill_tokens_per_s"] + df["decode_tokens_per_s"]
    df["prefill_token_share"] = df["prefill_tokens_per_s"] / tokens.where(tokens > 0)
    return df


def fleet_groups(hosts: pd.DataFrame) -> pd.DataFrame:
    """One row per group: hosts, GPUs, mean GPU counters over its hosts (NaN-skipping, and
    how many hosts reported them), summed engine rates, the group's prefill share."""
    rows = []
    for group, part in hosts.groupby("group", sort=True, dropna=False):
        row = {"group": group, "num_hosts": len(part), "num_gpus": int(part["num_gpus"].sum()),
               "hosts_reporting_gpu": int(part["sm_util_pct"].notna().sum())}
        for m in (*GPU_METRICS, *HOST_METRICS):
            row[m] = float(part[m].mean()) if part[m].notna().any() else np.nan
        for m in ("prefill_tokens_per_s", "decode_tokens_per_s", "requests_per_s"):
            row[m] = float(part[m].sum(min_count=1)) if part[m].notna().any() else np.nan
        tokens = row["prefill_tokens_per_s"] + row["decode_tokens_per_s"]
        row["prefill_token_share"] = row["prefill_tokens_per_s"] / tokens if tokens > 0 else np.nan
        rows.append(row)
    return pd.DataFrame(rows)
