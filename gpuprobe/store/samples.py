"""Counter samples: batched ingest, reads, downsampling for plots, retention.

A sample is (time, host, source, device, metric, value). Metric names carry their unit
(`sm_util_pct`, `power_w`, `dram_bw_util_pct`); a value of None means "no value" (for example
NVML answered NotSupported).
"""
from __future__ import annotations

import time
from typing import Iterable, NamedTuple

import pandas as pd

from gpuprobe.store.schema import ROLLUP_S


class Sample(NamedTuple):
    ts_s: float  # seconds since the Unix epoch
    host: str
    source: str  # "nvml", "gpm", "host", "engine", ...
    device: str  # "gpu0", "cpu", "eth0", an engine URL, ...
    metric: str  # unit in the name: "sm_util_pct"
    value: float | None
    labels: str = ""  # extra identity, e.g. "model=llama;engine=vllm"


def label_dict(labels: str | None) -> dict[str, str]:
    """A sample's labels text ("engine=vllm;model=llama") as a dict."""
    return dict(part.split("=", 1) for part in (labels or "").split(";") if "=" in part)


SAMPLE_COLUMNS = ["ts_s", "host", "source", "device", "metric", "labels", "value"]
DOWNSAMPLE_COLUMNS = ["ts_s", "host", "device", "value_min", "value_max", "value_mean", "num_samples"]


# Fold rows inserted after a rowid into the 10 s rollup (aggregated inside SQLite).
_ROLLUP_NEW_ROWS = """
INSERT INTO samples_10s (series_id, bucket_s, value_min, value_max, value_sum, num_samples)
SELECT series_id, CAST(ts_s / ? AS INTEGER) * ? AS b, MIN(value), MAX(value), SUM(value), COUNT(value)
FROM samples NOT INDEXED WHERE rowid > ? GROUP BY series_id, b  -- a rowid range, not an index scan
ON CONFLICT (series_id, bucket_s) DO UPDATE SET
    value_min = MIN(COALESCE(value_min, excluded.value_min), COALESCE(excluded.value_min, value_min)),
    value_max = MAX(COALESCE(value_max, excluded.value_max), COALESCE(excluded.value_max, value_max)),
    value_sum = COALESCE(value_sum, 0) + COALESCE(excluded.value_sum, 0),
    num_samples = num_samples + excluded.num_samples
"""


_DOWNSAMPLE_RAW = """
SELECT MIN(CAST((ts_s - ?) / ? AS INTEGER), ?) AS b, MIN(value), MAX(value), AVG(value), COUNT(value)
FROM samples WHERE series_id = ? AND ts_s >= ? AND ts_s <= ? GROUP BY b ORDER BY b
"""
_DOWNSAMPLE_ROLLUP = """
SELECT MAX(MIN(CAST((bucket_s - ?) / ? AS INTEGER), ?), 0) AS b, MIN(value_min), MAX(value_max),
       SUM(value_sum) / NULLIF(SUM(num_samples), 0), SUM(num_samples)
FROM samples_10s WHERE series_id = ? AND bucket_s >= ? AND bucket_s <= ? GROUP BY b ORDER BY b
"""


class SampleTables:
    """Mixin for Store: the samples and series tables."""

    def _series_ids(self, keys: Iterable[tuple[str, str, str, str, str]]) -> dict:
        missing = [k for k in set(keys) if k not in self._series_cache]
        if missing:
            self._conn.executemany(
                "INSERT OR IGNORE INTO series (host, source, device, metric, labels) VALUES (?,?,?,?,?)",
                missing)
            for row in self._conn.execute("SELECT id, host, source, device, metric, labels FROM series"):
                self._series_cache[tuple(row[1:])] = row[0]
        return self._series_cache

    def insert_samples(self, samples: Iterable[Sample]) -> int:
        """Write samples in one transaction; returns how many were written."""
        rows = list(samples)
        if not rows:
            return 0

        def write():
            ids = self._series_ids((s[1], s[2], s[3], s[4], s[6] if len(s) > 6 else "") for s in rows)
            # A bare MAX(rowid) is answered from the b-tree's end; wrapped in COALESCE it scans.
            last = self._conn.execute("SELECT MAX(rowid) FROM samples").fetchone()[0] or 0
            self._conn.executemany(
                "INSERT INTO samples (series_id, ts_s, value) VALUES (?,?,?)",
                [(ids[(s[1], s[2], s[3], s[4], s[6] if len(s) > 6 else "")], s[0], s[5]) for s in rows])
            self._conn.execute(_ROLLUP_NEW_ROWS, (ROLLUP_S, ROLLUP_S, last))
        self._write(write)
        return len(rows)

    def insert_sample_rows_slowly(self, samples: Iterable[Sample]) -> int:
        """One transaction per sample: the baseline that bench/store_bench.py compares against."""
        n = 0
        for s in samples:
            self.insert_samples([s])
            n += 1
        return n

    def series(self) -> pd.DataFrame:
        """Every known series: id, host, source, device, metric, labels."""
        return self._read("SELECT id AS series_id, host, source, device, metric, labels FROM series")

    def _series_filter(self, metric: str, host: str | None, device: str | None,
                       source: str | None) -> tuple[str, list]:
        where, args = ["metric = ?"], [metric]
        for col, val in (("host", host), ("device", device), ("source", source)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        return " AND ".join(where), args

    def samples(self, metric: str, start_s: float | None = None, end_s: float | None = None,
                host: str | None = None, device: str | None = None,
                source: str | None = None) -> pd.DataFrame:
        """Raw samples of one metric, columns SAMPLE_COLUMNS, ordered by time."""
        where, args = self._series_filter(metric, host, device, source)
        sql = (f"SELECT s.ts_s, r.host, r.source, r.device, r.metric, r.labels, s.value "
               f"FROM samples s JOIN series r ON r.id = s.series_id WHERE {where.replace('metric', 'r.metric')}"
               f" AND s.ts_s >= ? AND s.ts_s <= ? ORDER BY s.ts_s")
        args += [start_s if start_s is not None else -1e18, end_s if end_s is not None else 1e18]
        return self._read(sql, args)

    def metrics(self) -> list[str]:
        return [r[0] for r in self._conn.execute("SELECT DISTINCT metric FROM series ORDER BY metric")]

    def downsample(self, metric: str, start_s: float, end_s: float, max_points: int = 2000,
                   host: str | None = None, device: str | None = None,
                   source: str | None = None) -> pd.DataFrame:
        """One metric over [start_s, end_s] in at most `max_points` buckets per series.

        Columns DOWNSAMPLE_COLUMNS: ts_s is the bucket start; min, max and mean of the values
        in the bucket; empty buckets are absent. The aggregation runs inside SQLite, so only
        the buckets cross into Python.
        """
        if end_s <= start_s or max_points < 1:
            return pd.DataFrame(columns=DOWNSAMPLE_COLUMNS)
        width = (end_s - start_s) / max_points
        where, args = self._series_filter(metric, host, device, source)
        ids = self._conn.execute(f"SELECT id, host, device FROM series WHERE {where}", args).fetchall()
        frames = []
        # Buckets of at least 10 s read the rollup: a rollup bucket counts wholly in the plot
        # bucket that holds its start, so edges may shift by up to 10 s.
        sql = _DOWNSAMPLE_ROLLUP if width >= ROLLUP_S else _DOWNSAMPLE_RAW
        lo = (start_s // ROLLUP_S) * ROLLUP_S if width >= ROLLUP_S else start_s
        for series_id, h, d in ids:
            rows = self._conn.execute(sql, (start_s, width, max_points - 1, series_id, lo, end_s)).fetchall()
            if rows:
                df = pd.DataFrame(rows, columns=["b", "value_min", "value_max", "value_mean", "num_samples"])
                df.insert(0, "ts_s", start_s + df.pop("b") * width)
                df.insert(1, "host", h)
                df.insert(2, "device", d)
                frames.append(df)
        if not frames:
            return pd.DataFrame(columns=DOWNSAMPLE_COLUMNS)
        return pd.concat(frames, ignore_index=True)[DOWNSAMPLE_COLUMNS]

    def wide(self, metrics: list[str], start_s: float | None = None, end_s: float | None = None,
             host: str | None = None, device: str | None = None) -> pd.DataFrame:
        """Samples of several metrics side by side: ts_s, host, device, then one column per
        metric named after it (so units ride along: `sm_util_pct`, `power_w`)."""
        frames = [self.samples(m, start_s, end_s, host=host, device=device) for m in metrics]
        long = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else None
        if long is None:
            return pd.DataFrame(columns=["ts_s", "host", "device", *metrics])
        out = long.pivot_table(index=["ts_s", "host", "device"], columns="metric", values="value",
                               aggfunc="mean").reset_index()
        out.columns.name = None
        return out

    def apply_retention(self, max_age_s: float, mode: str = "delete", resolution_s: float = 60.0,
                        now_s: float | None = None) -> int:
        """Delete, or downsample to one mean per `resolution_s`, samples older than `max_age_s`.

        Returns the number of raw rows removed. Downsampled rows are remembered per series so
        a later pass does not average averages.
        """
        if mode not in ("delete", "downsample"):
            raise ValueError(f"retention mode must be 'delete' or 'downsample', not {mode!r}")
        cutoff = (now_s if now_s is not None else time.time()) - max_age_s
        removed = 0

        def work():
            nonlocal removed
            for (series_id,) in self._conn.execute("SELECT id FROM series").fetchall():
                if mode == "delete":
                    removed += self._conn.execute(
                        "DELETE FROM samples WHERE series_id = ? AND ts_s < ?", (series_id, cutoff)).rowcount
                    self._conn.execute("DELETE FROM samples_10s WHERE series_id = ? AND bucket_s < ?",
                                       (series_id, (cutoff // ROLLUP_S) * ROLLUP_S))
                    continue
                row = self._conn.execute("SELECT until_s FROM series_rollup WHERE series_id = ?",
                                         (series_id,)).fetchone()
                since = row[0] if row else -1e18
                cut = (cutoff // resolution_s) * resolution_s  # whole buckets only
                if cut <= since:
                    continue
                agg = self._conn.execute(
                    "SELECT CAST(ts_s / ? AS INTEGER) * ? AS b, AVG(value) FROM samples"
                    " WHERE series_id = ? AND ts_s >= ? AND ts_s < ? GROUP BY b",
                    (resolution_s, resolution_s, series_id, since, cut)).fetchall()
                removed += self._conn.execute(
                    "DELETE FROM samples WHERE series_id = ? AND ts_s >= ? AND ts_s < ?",
                    (series_id, since, cut)).rowcount
                self._conn.executemany("INSERT INTO samples (series_id, ts_s, value) VALUES (?,?,?)",
                                       [(series_id, b, v) for b, v in agg])
                removed -= len(agg)
                self._conn.execute("INSERT OR REPLACE INTO series_rollup VALUES (?, ?)", (series_id, cut))
        self._write(work)
        return removed
