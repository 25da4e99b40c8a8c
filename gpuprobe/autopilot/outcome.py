"""What the server saw: the window a decision reads (its arrivals, finished or not, refused
included) and what the next interval measured, for a decision's `outcome` (the server's
own request rows, source 'server', with the same SLO definitions as the predictions: TTFT,
and TBT as each request's mean gap)."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd


MAX_AGE_S = 600.0  # a request older than this at its finish is not looked for (outcomes)


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
    """The requests a decision reads: every one that reached the server in the `window_s`
    before now, as it stands now. Empty means no traffic: nothing arrived.

    From the server's `arrivals` (a row as each request comes, admitted or refused), so a
    backlog is load the moment it forms: a server that lags finishes nothing for a while, and
    a window of finished requests read that as no traffic. Columns: arrival_s,
    prompt_tokens, output_tokens (as served where it finished, else the max_tokens it asked
    for), status (ok, in_flight, or how it ended: error, aborted, http_<code> when refused),
    reason (a refusal's: context_length_exceeded, max_queue_wait, ...). A finished request
    with no arrival row (a store written before arrivals were) counts as it finished."""
    start = now_s - window_s
    arr = store.arrivals(since_s=start)
    arr = arr[arr["arrival_s"] < now_s]
    done = store.requests(source="server", since_s=start)
    done = done[(done["arrival_s"] < now_s) & (done["finish_s"].fillna(now_s) < now_s)]
    ended = done.drop_duplicates("request_id", keep="last").set_index("request_id")
    out = pd.DataFrame({"request_id": arr["request_id"], "arrival_s": arr["arrival_s"],
                        "prompt_tokens": arr["prompt_tokens"],
                        "output_tokens": arr["max_tokens"].astype(float),
                        "status": arr["status"].where(arr["status"] != "admitted", "in_flight"),
                        "reason": arr["reason"]})
    fin = out["request_id"].isin(ended.index) & (out["status"] == "in_flight")
    ids = out.loc[fin, "request_id"]
    out.loc[fin, "status"] = ended.loc[ids, "status"].to_numpy()
    out.loc[fin, "output_tokens"] = ended.loc[ids, "output_tokens"].to_numpy(float)
    older = done[~done["request_id"].isin(out["request_id"])]
    if len(older):
        out = pd.concat([out, older.assign(reason=None)[list(out.columns)]], ignore_index=True)
    return out.sort_values("arrival_s").reset_index(drop=True)


def backlog_before(store, start_s: float, now_s: float) -> int:
    """Requests admitted before start_s (within MAX_AGE_S) that have not finished by now_s:
    the backlog a window of arrivals does not show."""
    arr = store.arrivals(since_s=start_s - MAX_AGE_S)
    arr = arr[(arr["arrival_s"] < start_s) & (arr["status"] == "admitted")]
    if arr.empty:
        return 0
    done = store.requests(source="server", since_s=start_s - MAX_AGE_S)
    done = done[done["finish_s"].fillna(now_s) < now_s]
    return int((~arr["request_id"].isin(done["request_id"])).sum())


def load_summary(rows: pd.DataFrame, window_s: float, backlog: int = 0) -> dict:
    """What the window's arrivals came to, for the audit log: how many arrived, finished,
    are still in flight (with the `backlog` from before the window), refused, by reason."""
    status = rows["status"].fillna("ok")
    refused = rows[status.str.startswith("http_")]
    return {"arrivals": int(len(rows)), "arrivals_per_s": round(len(rows) / window_s, 3),
            "finished": int(status.isin(["ok", "error", "aborted"]).sum()),
            "in_flight": int((status == "in_flight").sum()) + backlog, "backlog": backlog,
            "refused": {str(k): int(v) for k, v in
                        refused["reason"].fillna(refused["status"]).value_counts().items()}}


def load_text(load: dict) -> str:
    """'load: 12 arrivals (4/s), 3 finished, 7 in flight (2 from before), 2 refused
    (max_queue_wait 2)'."""
    refused = sum(load["refused"].values())
    why = ", ".join(f"{k} {v}" for k, v in load["refused"].items())
    before = f" ({load['backlog']} from before)" if load["backlog"] else ""
    return (f"load: {load['arrivals']} arrivals ({load['arrivals_per_s']:g}/s), "
            f"{load['finished']} finished, {load['in_flight']} in flight{before}, "
            f"{refused} refused" + (f" ({why})" if why else ""))


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
