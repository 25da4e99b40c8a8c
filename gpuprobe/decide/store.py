"""Storing a recommendation: one `recommendations` row whose body is the full JSON."""
from __future__ import annotations

import json
import math
import socket


def save_recommendation(store, rec: dict) -> int:
    """Insert `rec` (recommend()'s dict) into store's recommendations; returns its id and
    sets rec['id']. The body is the whole recommendation, NaN written as null."""
    body = _clean(rec)
    rec_id = store.insert_recommendation({
        "host": socket.gethostname(), "workload": (rec.get("workload") or {}).get("name"),
        "layout": rec["layout"], "prefill_share": rec["params"].get("prefill_share"),
        "confidence": rec["confidence"]["value"], "confidence_label": rec["confidence"]["word"],
        "slo": body["slo"], "params": body["params"], "candidates": body["candidates"],
        "reasons": body["reasons"], "evidence": {"search": body.get("search", {})},
        "max_goodput_rps_per_device": rec["max_goodput_rps_per_device"],
        "margin": rec.get("margin"), "profile": (rec.get("profile") or {}).get("name"),
        "body": body})
    rec["id"] = rec_id
    return rec_id


def _clean(x):
    """JSON-safe copy: NaN and inf as None, numpy scalars as Python numbers."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def dumps(rec: dict) -> str:
    """The recommendation as one line of JSON (NaN as null)."""
    return json.dumps(_clean(rec))
