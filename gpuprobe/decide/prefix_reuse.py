"""Prompt tokens a prefix cache serves, measured, so a decision costs only the prefill left.

    reuse = measure_reuse(workload_df, profile, store)   # a PrefixReuse, or None
    wl = with_cached_tokens(workload_df, reuse)           # adds cached_tokens per request

Two measurements, the first found wins:
1. the workload's own Mooncake `hash_ids` (one id per 512-token prompt block, equal ids equal
   prefixes): each request's leading blocks an earlier request had, an upper bound (a cache
   with room for every block);
2. the engine's prefix-cache counters the agent stored (vLLM's prefix_cache_hits and
   prefix_cache_queries, tokens) for the served model, the profile's: hits / queries, applied
   to every prompt alike.
The simulator then prefills each prompt from its first uncached token (attention still spans
the cached prefix; the KV the request holds and hands off is the whole prompt's).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from gpuprobe.perf.costmodel import Profile
from gpuprobe.workloads.analyze import BLOCK_TOKENS, cached_prefix_blocks

HITS, QUERIES = "prefix_cache_hits_per_s", "prefix_cache_queries_per_s"
ATTR = "gpuprobe_prefix_reuse"  # the workload's attrs key: the PrefixReuse applied, as a dict


@dataclass(frozen=True)
class PrefixReuse:
    """hit_rate: prompt tokens served from the cache / prompt tokens (0-1); source: 'hash_ids'
    or 'store'; detail: where the figure came from, in words; model: the served model the
    store's counters were read for; hits_tokens / queries_tokens: the store's counts."""

    hit_rate: float
    source: str
    detail: str
    model: str | None = None
    hits_tokens: float | None = None
    queries_tokens: float | None = None


def model_key(name: str) -> str:
    """A model name as two sources spell it alike: lower case, no path, no '-shape'."""
    name = str(name).lower().rsplit("/", 1)[-1]
    return name[:-len("-shape")] if name.endswith("-shape") else name


def measure_reuse(wl: pd.DataFrame, profile: Profile, store=None) -> PrefixReuse | None:
    """The workload's hash_ids reuse where it has any, else the store's measured hit rate for
    the profile's model; None when neither says anything."""
    return _from_hashes(wl) or (_from_store(store, profile.meta.get("model"))
                                if store is not None else None)


def with_cached_tokens(wl: pd.DataFrame, reuse: PrefixReuse | None) -> pd.DataFrame:
    """wl with `cached_tokens` per request (at most its prompt less one token: the last is
    always computed, as vLLM does) and attrs[ATTR] = the reuse plus the share of prompt tokens
    it took off (`cached_share`). Hash ids count per request; a rate scales every prompt."""
    if reuse is None:
        return wl
    prompt = wl["prompt_tokens"].to_numpy(dtype=np.int64)
    if reuse.source == "hash_ids" and "hash_ids" in wl.columns:
        scaled = wl.attrs.get("gpuprobe_scaled", {})  # --prompt-scale / --token-scale
        factor = scaled.get("prompt_scale", 1.0) * scaled.get("token_scale", 1.0)
        cached = np.round(cached_prefix_blocks(wl["hash_ids"]) * BLOCK_TOKENS * factor)
    else:
        cached = np.round(prompt * reuse.hit_rate)
    cached = np.clip(cached.astype(np.int64), 0, np.maximum(prompt - 1, 0))
    out = wl.assign(cached_tokens=cached)
    share = float(cached.sum() / prompt.sum()) if prompt.sum() else 0.0
    out.attrs = {**wl.attrs, ATTR: {**asdict(reuse), "cached_share": share}}
    return out


def _from_hashes(wl: pd.DataFrame) -> PrefixReuse | None:
    if "hash_ids" not in wl.columns or not wl["hash_ids"].notna().any():
        return None
    blocks = cached_prefix_blocks(wl["hash_ids"])
    prompt = wl["prompt_tokens"].to_numpy(dtype=np.int64)
    cached = np.minimum(blocks * BLOCK_TOKENS, np.maximum(prompt - 1, 0))
    rate = float(cached.sum() / prompt.sum()) if prompt.sum() else 0.0
    return PrefixReuse(rate, "hash_ids", f"the workload's hash_ids: {int((blocks > 0).sum())} of "
                       f"{len(wl)} requests start with {BLOCK_TOKENS}-token blocks an earlier "
                       "request had (an upper bound: a cache with room for every block)")


def _from_store(store, model: str | None) -> PrefixReuse | None:
    """hits / queries over the store's engine counters for `model` (any model when the
    profile names none and the counters name one). Each sample is a rate over the window
    since its series' previous one: counts are rate x window."""
    counts = {m: _counts(store, m) for m in (HITS, QUERIES)}
    if counts[QUERIES].empty:
        return None
    models = set(counts[QUERIES]["model"])
    if model is not None:
        want = {m for m in models if model_key(m) == model_key(model)}
    else:
        want = models if len(models) == 1 else set()
    if not want:
        return None
    q = counts[QUERIES][counts[QUERIES]["model"].isin(want)]
    h = counts[HITS][counts[HITS]["model"].isin(want)]
    queries, hits = float(q["count"].sum()), float(h["count"].sum())
    if queries <= 0:
        return None
    name = ", ".join(sorted(want))
    where = ", ".join(sorted(set(q["device"])))
    detail = (f"the engine's prefix-cache counters in the store for {name}: {hits:,.0f} of "
              f"{queries:,.0f} prompt tokens looked up were cached ({len(q)} scrapes of "
              f"{where})")
    return PrefixReuse(min(1.0, hits / queries), "store", detail, name, hits, queries)


def _counts(store, metric: str) -> pd.DataFrame:
    """The metric's samples with `model` (from the labels) and `count` (rate x window)."""
    from gpuprobe.store import label_dict

    s = store.samples(metric, source="engine")
    if s.empty:
        return pd.DataFrame(columns=["model", "device", "count"])
    s = s.assign(model=[label_dict(x).get("model", "") for x in s["labels"]])
    dt = s.groupby(["device", "labels"])["ts_s"].diff()
    dt = dt.fillna(dt.median() if dt.notna().any() else 1.0)
    return s.assign(count=s["value"].fillna(0.0).to_numpy() * dt.to_numpy())
