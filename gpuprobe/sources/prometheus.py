"""Counters read from Prometheus, in the embedded store's shapes.

    src = PrometheusSource("http://127.0.0.1:9090")
    src.downsample("sm_util_pct", t0, t1, max_points=2000)  # the same columns as Store.downsample
    src.samples("power_w", t0, t1)                          # the same columns as Store.samples
    src.series()                                            # host, source, device, metric, labels

Every agent re-exports its samples on /metrics (collectors/exporter.py) as
gpuprobe_{gpu,host,engine}_<store metric>, with the labels gpu/device/target and hostname;
a Prometheus that scrapes the agents therefore holds the same series as each agent's store,
and this class reads them back under the store's names. A series' host is its `hostname`
label, else Prometheus's `instance` (three agents on one machine: give each `--hostname`, or
read them apart by instance). A host that lacks a series has no rows, never zeros.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from gpuprobe.sources.promapi import PromApi, duration
from gpuprobe.store.samples import DOWNSAMPLE_COLUMNS, SAMPLE_COLUMNS

# store source -> the exporter's name prefix
_PREFIX = {"nvml": "gpu", "gpm": "gpu", "gpu_proc": "gpu", "gpu": "gpu", "host": "host",
           "engine": "engine"}
_NAME = re.compile(r"^gpuprobe_(gpu|host|engine)_(.+)$")
_IDENTITY = {"gpu", "uuid", "pid", "device", "target", "engine", "model", "hostname", "instance",
             "job", "__name__"}


class PrometheusSource:
    """Read-only counters from a Prometheus HTTP API. min_step_s: the finest step asked for
    (about the scrape interval; a finer one only repeats points)."""

    def __init__(self, url: str, timeout_s: float = 10.0, min_step_s: float = 1.0):
        self.api = PromApi(url, timeout_s)
        self.url = self.api.url
        self.min_step_s = min_step_s

    def __repr__(self) -> str:
        return f"prometheus={self.url}"

    # --- names ----------------------------------------------------------------------------
    @staticmethod
    def selector(metric: str, host: str | None = None, device: str | None = None,
                 source: str | None = None) -> str:
        """The PromQL selector of a store metric (any of the three prefixes unless `source`)."""
        prefix = _PREFIX.get(source or "", "(gpu|host|engine)")
        matchers = [f'__name__=~"gpuprobe_{prefix}_{re.escape(metric)}"']
        if host is not None:
            matchers.append(f'hostname="{_quote(host)}"')
        if device is not None:
            gpu = re.fullmatch(r"gpu(\d+)", device)
            matchers.append(f'gpu="{gpu.group(1)}"' if gpu else f'device="{_quote(device)}"')
        return "{" + ", ".join(matchers) + "}"

    @staticmethod
    def identity(labels: dict) -> dict:
        """host, source, device, metric and the remaining labels of one exported series."""
        m = _NAME.match(labels.get("__name__", ""))
        prefix, metric = (m.group(1), m.group(2)) if m else ("", labels.get("__name__", ""))
        if "gpu" in labels:
            device = f"gpu{labels['gpu']}"
        else:
            device = labels.get("target") or labels.get("device") or ""
        extra = ";".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in _IDENTITY)
        for k in ("engine", "model", "uuid", "pid"):
            if labels.get(k):
                extra = f"{k}={labels[k]}" + (";" + extra if extra else "")
        return {"host": labels.get("hostname") or labels.get("instance", ""),
                "source": prefix, "device": device, "metric": metric, "labels": extra}

    # --- the store's readers ----------------------------------------------------------------
    def series(self, start_s: float | None = None, end_s: float | None = None) -> pd.DataFrame:
        """Every gpuprobe series Prometheus saw in the range (default: the last hour)."""
        end_s = end_s if end_s is not None else _now()
        start_s = start_s if start_s is not None else end_s - 3600
        sets = self.api.series('{__name__=~"gpuprobe_(gpu|host|engine)_.+"}', start_s, end_s)
        rows = [self.identity(s) for s in sets]
        df = pd.DataFrame(rows, columns=["host", "source", "device", "metric", "labels"])
        df = df.drop_duplicates().sort_values(["host", "source", "device", "metric"]).reset_index(drop=True)
        df.insert(0, "series_id", np.arange(len(df)))
        return df

    def metrics(self, start_s: float | None = None, end_s: float | None = None) -> list[str]:
        return sorted(set(self.series(start_s, end_s)["metric"]))

    def samples(self, metric: str, start_s: float, end_s: float, host: str | None = None,
                device: str | None = None, source: str | None = None) -> pd.DataFrame:
        """Values at every `min_step_s` (Prometheus's view of the raw samples)."""
        sel = self.selector(metric, host, device, source)
        frames = []
        for labels, ts, vals in self.api.query_range(sel, start_s, end_s, self.min_step_s):
            ident = self.identity(labels)
            keep = ~np.isnan(vals)
            frames.append(pd.DataFrame({"ts_s": ts[keep], **{k: ident[k] for k in (
                "host", "source", "device", "metric", "labels")}, "value": vals[keep]}))
        if not frames:
            return pd.DataFrame(columns=SAMPLE_COLUMNS)
        return pd.concat(frames, ignore_index=True).sort_values("ts_s", kind="stable")[SAMPLE_COLUMNS]

    def downsample(self, metric: str, start_s: float, end_s: float, max_points: int = 2000,
                   host: str | None = None, device: str | None = None,
                   source: str | None = None) -> pd.DataFrame:
        """One metric in at most `max_points` buckets per series: min, max, mean and count of
        the scraped values in each, computed by Prometheus (*_over_time), so only the buckets
        cross the network. ts_s is the bucket start."""
        if end_s <= start_s or max_points < 1:
            return pd.DataFrame(columns=DOWNSAMPLE_COLUMNS)
        step = max((end_s - start_s) / max_points, self.min_step_s)
        window = duration(max(step, 2 * self.min_step_s))
        sel = self.selector(metric, host, device, source)
        parts = {}
        for col, fn in (("value_mean", "avg"), ("value_min", "min"), ("value_max", "max"),
                        ("num_samples", "count")):
            for labels, ts, vals in self.api.query_range(f"{fn}_over_time({sel}[{window}])",
                                                         start_s + step, end_s, step):
                ident = self.identity({**labels, "__name__": labels.get("__name__", "")})
                key = (ident["host"], ident["device"], _series_key(labels))
                parts.setdefault(key, {})[col] = pd.Series(vals, index=ts - step)
        frames = []
        for (host_, device_, _), cols in parts.items():
            df = pd.DataFrame(cols).dropna(subset=["value_mean"])
            df.index.name = "ts_s"
            df = df.reset_index()
            df.insert(1, "host", host_)
            df.insert(2, "device", device_)
            frames.append(df)
        if not frames:
            return pd.DataFrame(columns=DOWNSAMPLE_COLUMNS)
        out = pd.concat(frames, ignore_index=True)[DOWNSAMPLE_COLUMNS]
        out["num_samples"] = out["num_samples"].fillna(0).astype(int)
        return out


def _series_key(labels: dict) -> tuple:
    # *_over_time drops __name__; the rest of the labels tell series apart
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _now() -> float:
    import time
    return time.time()
