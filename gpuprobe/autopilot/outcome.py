"""What the next interval measured, for a decision's `outcome`: from the server's own request
rows in the store (source 'server'), the same SLO definitions as the predictions (TTFT, and
TBT as each request's mean gap)."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd


MAX_AGE_S = 600.0  # a request older than this at its finish is not looked for


def server_requests(store, start_s: float, end_s: float) -> pd.DataFrame:
    """The server's request rows that finished in [start_s, end_s). By finish, because the
    server writes a row when its request ends: a window by arrival would miss the requests
    still running, all of them when the server is slow."""
    df, end = _rows(store, start_s)
    return df[(end >= start_s) & (end < end_s)]


def _rows(store, start_s: float) -> tuple[pd.DataFrame, pd.Series]:
    """The server's request rows that may have finished since start_s, and their finish times
    (arrival where none)."""
    df = store.requests(source="server", since_s=start_s - MAX_AGE_S)
    return df, (df["finish_s"].fillna(df["arrival_s"]) if len(df) else pd.Series(dtype=float))


def recent_window(store, now_s: float, window_s: float) -> pd.DataFrame:
    """The requests a decision reads: those that arrived within `window_s` before the newest
    arrival among the requests finished by `now_s`, provided some finished in the last
    `window_s` (else none: no traffic).

    By arrival, so a window holds one stretch of traffic: a server that lags finishes old
    requests late and in bursts, and a window by finish time would mix them with new ones
    and blur a shift in the mix. Ending at the newest finished arrival, not at `now_s`,
    because the server writes a row only when its request ends: a window of arrivals ending
    now would miss every request still running."""
    df, end = _rows(store, now_s)
    done = end < now_s
    if not (done & (end >= now_s - window_s)).any():
        return df.iloc[:0]
    df = df[done]
    newest = float(df["arrival_s"].max())
    return df[df["arrival_s"] > newest - window_s]


def measure(rows: pd.DataFrame, slo_ttft_s: float, slo_tbt_s: float) -> dict:
    """Counts, latency percentiles and SLO attainment of `rows` (server request rows)."""
    n = len(rows)
    if not n:
        return {"requests": 0}
    ok = rows["status"].fillna("ok") == "ok"
    tbt = np.array([_mean_gap(t) for t in rows["token_times"]], dtype=float)
    ttft = rows["ttft_s"].to_numpy(dtype=float)
    met = ok.to_numpy() & (ttft <= slo_ttft_s) & (np.isnan(tbt) | (tbt <= slo_tbt_s))
    layouts = rows["layout"].fillna("").value_counts().to_dict()
    return {"requests": int(n), "failed": int((~ok).sum()),
            "ttft_p99_s": _p(ttft, 99), "ttft_p50_s": _p(ttft, 50),
            "tbt_mean_p99_s": _p(tbt, 99), "slo_attainment": round(float(met.mean()), 4),
            "layouts": {str(k): int(v) for k, v in layouts.items()}}


def _mean_gap(token_times) -> float:
    t = json.loads(token_times) if isinstance(token_times, str) else (token_times or [])
    return (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else math.nan


def _p(x: np.ndarray, q: float) -> float | None:
    x = x[np.isfinite(x)]
    return round(float(np.percentile(x, q)), 6) if len(x) else None
