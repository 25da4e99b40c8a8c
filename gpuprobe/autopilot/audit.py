"""The audit log read back: `gpuprobe autopilot log` as text or JSON."""
from __future__ import annotations

import json
import time

import pandas as pd

JSON_FIELDS = ("params", "forecast", "candidates", "predicted", "outcome")


def records(df: pd.DataFrame) -> list[dict]:
    out = []
    for row in df.to_dict("records"):
        row["id"] = int(row.pop("pk"))
        for k in JSON_FIELDS:
            if isinstance(row.get(k), str):
                row[k] = json.loads(row[k])
        out.append({k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()})
    return out


def lines(recs: list[dict]) -> list[str]:
    """One line per decision, and its outcome indented under it."""
    out = []
    for r in recs:
        f = r.get("forecast") or {}
        load = (f"{f.get('requests_per_s', 0):.2f} req/s, {f.get('prefill_tokens_per_s', 0):.0f} "
                f"prefill tok/s, {f.get('decode_tokens_per_s', 0):.0f} decode tok/s"
                if f.get("window_requests") else "no requests")
        out.append(f"#{r['id']} {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(r['ts_s']))} "
                   f"{r['target']} {r.get('current_layout') or '?'} -> {r['action']}"
                   f"{' ' + r['chosen_layout'] if r.get('chosen_layout') else ''}: {r.get('reason')}")
        out.append(f"    window: {load}")
        for c in (r.get("candidates") or [])[:4]:
            out.append(f"    predicted {c.get('layout'):<10} attain={_f(c.get('slo_attainment'))} "
                       f"goodput/dev={_f(c.get('max_goodput_rps_per_device', c.get('goodput_rps_per_device')))} "
                       f"ttft_p99={_f(c.get('ttft_p99_s'))}s tbt_p99={_f(c.get('tbt_p99_s'))}s")
        o = r.get("outcome")
        if o:
            out.append(f"    measured next: {o.get('requests', 0)} requests, {o.get('failed', 0)} failed, "
                       f"attain={_f(o.get('slo_attainment'))} ttft_p99={_f(o.get('ttft_p99_s'))}s "
                       f"tbt_mean_p99={_f(o.get('tbt_mean_p99_s'))}s on {o.get('layout_after')}"
                       f"{' (partial)' if o.get('partial') else ''}")
    return out


def _f(x) -> str:
    return "-" if x is None else f"{float(x):.3g}"
