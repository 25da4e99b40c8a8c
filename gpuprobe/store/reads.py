"""Read helpers for the store's readers (the dashboard): what has changed, what time the data
spans, what was sampled from where, and requests bucketed over time. All aggregation runs inside
SQLite on indexed columns, so a day of 10 Hz samples costs a few index probes, not a scan.

    version = data_version(store)                 # changes whenever any table gains a row
    span = sample_span(store)                     # (first_s, last_s) of every sample, or None
    df = request_buckets(store, t0, t1, 2000)     # ts_s, requests_per_s, ..., ttft_p99_s
    counts = table_counts(store, ("requests", "steps"))  # {"requests": 19366, "steps": 0}
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

# Tables whose newest rowid says "new data arrived" (a rowid only grows in these tables).
VERSIONED_TABLES = ("samples", "requests", "steps", "layout_events", "events", "workloads",
                    "recommendations", "forecasts", "validations", "decisions", "runs")
REQUEST_BUCKET_COLUMNS = ["ts_s", "num_requests", "requests_per_s", "prefill_tokens_per_s",
                          "decode_tokens_per_s", "ttft_p50_s", "ttft_p99_s", "tbt_p50_s", "tbt_p99_s"]


def data_version(store) -> tuple:
    """The newest rowid of each table (plus applied/outcome marks, which are updates): equal
    tuples mean nothing was written in between. A bare MAX(rowid) reads the b-tree's end."""
    with store._lock:
        out = tuple(store._conn.execute(f"SELECT MAX(rowid) FROM {t}").fetchone()[0] or 0
                    for t in VERSIONED_TABLES)
        marks = store._conn.execute(
            "SELECT (SELECT MAX(applied_s) FROM recommendations), (SELECT MAX(outcome_s) FROM decisions)"
        ).fetchone()
    return out + tuple(marks)


def sample_span(store, metric: str | None = None) -> tuple[float, float] | None:
    """(first, last) sample time over every series (or one metric's), from the per-series
    index ends; None without samples."""
    where, args = ("WHERE metric = ?", [metric]) if metric else ("", [])
    with store._lock:
        ids = [r[0] for r in store._conn.execute(f"SELECT id FROM series {where}", args)]
        lo = hi = None
        for sid in ids:
            a = store._conn.execute("SELECT MIN(ts_s) FROM samples WHERE series_id = ?", (sid,)).fetchone()[0]
            b = store._conn.execute("SELECT MAX(ts_s) FROM samples WHERE series_id = ?", (sid,)).fetchone()[0]
            if a is not None:
                lo, hi = (a if lo is None else min(lo, a)), (b if hi is None else max(hi, b))
    return None if lo is None else (float(lo), float(hi))


def request_span(store, source: str | None = None) -> tuple[float, float] | None:
    """(first, last) arrival of the stored requests (of one source), or None."""
    where, args = ("WHERE source = ?", [source]) if source else ("", [])
    with store._lock:
        lo, hi = store._conn.execute(f"SELECT MIN(arrival_s), MAX(arrival_s) FROM requests {where}",
                                     args).fetchone()
    return None if lo is None else (float(lo), float(hi))


def layout_span(store) -> tuple[float, float] | None:
    """(first, last) layout switch, or None."""
    with store._lock:
        lo, hi = store._conn.execute("SELECT MIN(ts_s), MAX(ts_s) FROM layout_events").fetchone()
    return None if lo is None else (float(lo), float(hi))


def table_counts(store, tables) -> dict[str, int]:
    """Rows in each of `tables` (names from the schema, never from a user)."""
    with store._lock:
        return {t: store._conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}


def latest_events(store, kinds, limit: int = 20) -> pd.DataFrame:
    """The newest `limit` stored events of the given kinds: ts_s, host, device, kind, message,
    newest first."""
    kinds = tuple(kinds)
    return store._read("SELECT ts_s, host, device, kind, message FROM events WHERE kind IN "
                       f"({', '.join('?' * len(kinds))}) ORDER BY ts_s DESC LIMIT ?", (*kinds, int(limit)))


def request_tbt_p50s(store, since_s: float) -> np.ndarray:
    """Per-request median TBT (s) of the ok requests that arrived at or after since_s."""
    df = store._read("SELECT tbt_p50_s FROM requests WHERE arrival_s >= ? AND status = 'ok' "
                     "AND tbt_p50_s IS NOT NULL", (since_s,))
    return df["tbt_p50_s"].to_numpy(dtype=float)


def validation_body(store, pk: int) -> dict:
    """The JSON result a validate run stored (validations.body), or {} when there is none."""
    with store._lock:
        row = store._conn.execute("SELECT body FROM validations WHERE pk = ?", (int(pk),)).fetchone()
    return json.loads(row[0]) if row and row[0] else {}


def profiles(store) -> pd.DataFrame:
    """Stored profiles, newest first: created_s, name (as stored), target (the server's URL a
    `profile --target` measured, else None), body (the profile's JSON text)."""
    return store._read("SELECT created_s, name, target, body FROM profiles ORDER BY pk DESC")


def forecast_index(store) -> pd.DataFrame:
    """One row per stored forecast, newest first: forecast_id, workload, created_s, as_of_s,
    bucket_s, horizon_s, metrics and models (comma-separated)."""
    return store._read(
        "SELECT forecast_id, workload, MAX(created_s) AS created_s, MAX(as_of_s) AS as_of_s, "
        "MAX(bucket_s) AS bucket_s, MAX(horizon_s) AS horizon_s, "
        "GROUP_CONCAT(DISTINCT metric) AS metrics, GROUP_CONCAT(DISTINCT model) AS models "
        "FROM forecasts GROUP BY COALESCE(forecast_id, CAST(created_s AS TEXT)) ORDER BY created_s DESC")


def inventory(store) -> pd.DataFrame:
    """What was sampled: host, source, device, num_metrics, metrics (comma-separated)."""
    return store._read(
        "SELECT host, source, device, COUNT(*) AS num_metrics, GROUP_CONCAT(metric, ',') AS metrics "
        "FROM series GROUP BY host, source, device ORDER BY host, source, device")


def request_sources(store) -> pd.DataFrame:
    """source, num_requests, first_s, last_s per source of stored requests."""
    return store._read("SELECT source, COUNT(*) AS num_requests, MIN(arrival_s) AS first_s, "
                       "MAX(arrival_s) AS last_s FROM requests GROUP BY source ORDER BY num_requests DESC")


def request_buckets(store, start_s: float, end_s: float, max_points: int = 2000,
                    source: str | None = None) -> pd.DataFrame:
    """Requests arriving in [start_s, end_s], in at most `max_points` equal buckets: the
    request rate, prompt and output tokens per second (attributed to the arrival bucket, as
    `analyze` does), and TTFT and per-request TBT percentiles over the bucket's ok requests.
    Columns REQUEST_BUCKET_COLUMNS; ts_s is the bucket start; empty buckets are absent."""
    if end_s <= start_s or max_points < 1:
        return pd.DataFrame(columns=REQUEST_BUCKET_COLUMNS)
    width = (end_s - start_s) / max_points
    where, args = "arrival_s >= ? AND arrival_s <= ?", [start_s, end_s]
    if source:
        where, args = where + " AND source = ?", args + [source]
    counts = store._read(
        f"SELECT MIN(CAST((arrival_s - ?) / ? AS INTEGER), ?) AS b, COUNT(*) AS num_requests, "
        f"SUM(prompt_tokens) AS p, SUM(output_tokens) AS o FROM requests WHERE {where} "
        f"GROUP BY b ORDER BY b", [start_s, width, max_points - 1, *args])
    if counts.empty:
        return pd.DataFrame(columns=REQUEST_BUCKET_COLUMNS)
    lat = store._read(
        f"SELECT MIN(CAST((arrival_s - ?) / ? AS INTEGER), ?) AS b, ttft_s, tbt_p50_s, tbt_p99_s "
        f"FROM requests WHERE {where} AND status = 'ok'", [start_s, width, max_points - 1, *args])
    g = lat.groupby("b")
    q = pd.DataFrame({"ttft_p50_s": g["ttft_s"].quantile(0.5), "ttft_p99_s": g["ttft_s"].quantile(0.99),
                      "tbt_p50_s": g["tbt_p50_s"].quantile(0.5), "tbt_p99_s": g["tbt_p99_s"].quantile(0.99)})
    out = counts.set_index("b").join(q, how="left").reset_index()
    out["ts_s"] = start_s + out["b"] * width
    out["requests_per_s"] = out["num_requests"] / width
    out["prefill_tokens_per_s"] = out.pop("p").astype(float) / width
    out["decode_tokens_per_s"] = out.pop("o").astype(float) / width
    return out[REQUEST_BUCKET_COLUMNS].astype({"num_requests": np.int64})
