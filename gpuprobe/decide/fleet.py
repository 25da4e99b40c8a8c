"""A recommendation per fleet group (`fleet --profile`): each group's rates over the range,
per host, as a workload (sources/prom_workload), weighed by the one decision call
(run_decision) on the group's GPUs per host; not stored.

    recs = group_recommendations(src, t0, t1, hosts, "host_group", profile, slo)
    recs["chat"]["layout"], recs["code"]["error"]
"""
from __future__ import annotations

from typing import Callable

import pandas as pd

from gpuprobe.errors import UserError
from gpuprobe.sources.prom_mix import bucket_mix
from gpuprobe.sources.prom_workload import HISTOGRAMS, length_histogram, workload_from_rates


def group_recommendations(src, start_s: float, end_s: float, hosts: pd.DataFrame, by: str, profile, slo,
                          bucket_s: float = 60.0, seed: int = 0,
                          progress: Callable[[str], None] | None = None) -> dict[str, dict]:
    """{group: the recommendation's summary, or {"error": why}} for every group in `hosts`
    (fleet_hosts' frame). A group's workload is its engines' rates divided by its hosts;
    devices are its GPUs per host (at least one)."""
    from gpuprobe.decide.decision import DecisionOptions, run_decision

    bucket_s = min(bucket_s, max((end_s - start_s) / 4, 1.0))
    mix = bucket_mix(src.api, start_s, end_s, bucket_s, by=by, agents_only=True)
    out: dict[str, dict] = {}
    for group, part in hosts.groupby("group", sort=True):
        num_hosts, gpus = len(part), int(part["num_gpus"].sum())
        devices = max(1, round(gpus / num_hosts))
        rows = mix[mix["group"] == group]
        per_host = rows.assign(**{c: rows[c] / num_hosts for c in
                                  ("requests_per_s", "prefill_tokens_per_s", "decode_tokens_per_s")})
        matcher = f'{by}="{group}"'
        try:
            hists = [length_histogram(src.api, HISTOGRAMS[k], start_s, end_s, matcher) for k in ("prompt", "output")]
            wl = workload_from_rates(per_host, bucket_s, *hists, seed=seed)
            if progress:
                progress(f"{by}={group}: {len(wl)} requests per host, {devices} device(s) per host")
            rec = run_decision(wl, profile, slo, DecisionOptions(max_devices=devices, seed=seed),
                               workload_name=f"{by}={group}").to_dict()
        except UserError as exc:
            out[group] = {"error": str(exc)}
            continue
        out[group] = {**{k: rec[k] for k in ("layout", "label", "params", "decision", "margin",
                                             "max_goodput_rps_per_device", "confidence", "reasons")},
                      "devices_per_host": devices, "lengths": wl.attrs["gpuprobe_lengths"]}
    return out
