"""What plan and apply read from a stored recommendation, in one place.

The recommendation's `params` differ by layout (monolithic: chunked_prefill,
max_num_batched_tokens, max_num_seqs; intra: prefill_share; cross: prefill_devices,
decode_devices, link). `target_of` turns a record into one flat, frozen `Target`, so a change
in how `recommend` writes params is reconciled here and nowhere else.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from gpuprobe.errors import UserError


@dataclass(frozen=True)
class Target:
    """The chosen layout and its parameters, as plan and apply need them."""

    rec_id: int
    workload: str
    layout: str  # monolithic | intra | cross
    prefill_share: float | None  # intra/cross: the prefill side's fraction (SMs, cores, devices)
    chunked_prefill: bool = False
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    prefill_devices: int = 1
    decode_devices: int = 1
    devices: int = 1  # monolithic: replicas; cross: prefill_devices + decode_devices
    link: str | None = None  # nvlink | ib | roce | tcp | "<GBPS>"
    model: str | None = None  # the profile's model, when the recommendation names it


def load_recommendation(store, rec_id: int, flag: str = "--recommendation") -> dict:
    """The stored record, or UserError (exit 2) naming the flag and the id that is not there."""
    rec = store.recommendation(int(rec_id))
    if rec is None:
        raise UserError(f"{flag} {rec_id}: no such recommendation in this store "
                        f"(gpuprobe recommend stores one and prints its id)")
    return rec


def target_of(rec: dict) -> Target:
    """UserError (one line, naming the recommendation) when its params cannot be read."""
    try:
        return _target(rec)
    except (TypeError, ValueError, KeyError) as exc:
        raise UserError(f"recommendation {rec.get('id')}: params {rec.get('params')!r} cannot "
                        f"be read ({exc})") from None


def _target(rec: dict) -> Target:
    layout = rec.get("layout")
    if layout not in ("monolithic", "intra", "cross"):
        raise UserError(f"recommendation {rec.get('id')}: layout {layout!r} is not one of "
                        f"monolithic, intra, cross")
    p = rec.get("params") or {}
    body = rec.get("body") or {}
    share = p.get("prefill_share", rec.get("prefill_share"))
    # the brief's names, and the ones recommend's candidates write (num_prefill, num_decode)
    x = int(p.get("prefill_devices", p.get("num_prefill", 1)))
    y = int(p.get("decode_devices", p.get("num_decode", 1)))
    if layout == "cross" and share is None:
        share = x / (x + y)
    devices = x + y if layout == "cross" else int(body.get("devices") or p.get("devices") or 1)
    if min(x, y) < 1:
        raise ValueError(f"device counts must be at least 1, got {x}P{y}D")
    if layout != "monolithic" and share is not None and not 0 < float(share) < 1:
        raise ValueError(f"prefill_share must be between 0 and 1, got {share}")
    return Target(
        rec_id=int(rec["id"]), workload=str(rec.get("workload") or ""), layout=layout,
        prefill_share=None if layout == "monolithic" else float(0.5 if share is None else share),
        chunked_prefill=bool(p.get("chunked_prefill", False)),
        max_num_batched_tokens=_int_or_none(p.get("max_num_batched_tokens")),
        max_num_seqs=_int_or_none(p.get("max_num_seqs")),
        prefill_devices=x, decode_devices=y, devices=devices,
        link=_text_or_none(p.get("link", body.get("link"))),
        model=_model(rec))


def layout_request(t: Target) -> dict:
    """The reference server's POST /admin/layout body for this target. max_num_seqs and the
    device counts are fixed when the server starts, so they are not part of a live switch."""
    body: dict = {"layout": t.layout}
    if t.layout != "monolithic":
        body["prefill_share"] = round(float(t.prefill_share), 4)
    if t.layout == "monolithic" and t.chunked_prefill and t.max_num_batched_tokens:
        body["chunked_prefill_tokens"] = t.max_num_batched_tokens
    return body


def _text_or_none(v) -> str | None:
    return None if v is None else str(v)


def _int_or_none(v) -> int | None:
    return None if v is None else int(v)


def _model(rec: dict) -> str | None:
    """The model the profile was measured with: profile meta, body, or None."""
    prof = rec.get("profile")
    if isinstance(prof, str):
        try:
            prof = json.loads(prof)
        except ValueError:
            prof = None
    for src in (prof, (rec.get("body") or {}).get("profile"), rec.get("body")):
        if isinstance(src, dict):
            meta = src.get("meta") if isinstance(src.get("meta"), dict) else src
            if isinstance(meta.get("model"), str) and meta["model"]:
                return meta["model"]
    return None
