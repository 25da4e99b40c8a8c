"""The recommendation as one frozen record: what to run (`Deployment`, one name per setting)
and why (the ranked candidates, reasons, confidence, the question it answered).

Every reader (CLI, dashboard, report, plan, apply, check, autopilot) gets it the same way:

    rec = load_recommendation(store, rec_id)        # or latest_recommendation(store, workload)
    rec.deployment.layout, rec.deployment.num_prefill, rec.deployment.devices, rec.reasons
    rec = save_recommendation(store, rec)           # the stored copy, with its id

The store keeps rows (`recommendations`, the whole record as JSON in `body`); the row is
turned into a Recommendation here and nowhere else, including rows written before this type
(schema 5 bodies: `devices` and `units` for the device budget and the copies, a chunk budget
as chunked_prefill + max_num_batched_tokens, the model in the profile column).
"""
from __future__ import annotations

import json
import math
import socket
from dataclasses import dataclass, field, fields

from gpuprobe.decide.candidates import SIMPLER_FIRST, Candidate, read_params
from gpuprobe.errors import UserError
from gpuprobe.perf.metrics import Slo

COUNTS = ("num_prefill", "num_decode", "prefill_tp", "decode_tp", "tp", "replicas")


@dataclass(frozen=True)
class Deployment:
    """How to run the chosen layout. A unit is one engine (monolithic, intra: `tp` devices)
    or one xPyD group (cross: num_prefill workers of prefill_tp devices, num_decode of
    decode_tp); `replicas` copies of the unit each serve an equal share of the load."""

    layout: str                                # monolithic | intra | cross
    chunked_prefill_tokens: int | None = None  # monolithic: prefill budget per step (None: whole prompts)
    prefill_share: float | None = None         # intra: the prefill worker's share of the device
    num_prefill: int = 1                       # cross: prefill workers
    num_decode: int = 1                        # cross: decode workers
    prefill_tp: int = 1                        # cross: devices per prefill worker (tensor parallel)
    decode_tp: int = 1                         # cross: devices per decode worker
    tp: int = 1                                # monolithic, intra: devices per worker
    replicas: int = 1                          # copies of the unit (data parallel)
    max_num_seqs: int | None = None            # per engine; None: the engine's default
    link: str | None = None                    # cross's KV link: nvlink | ib | roce | tcp | GB/s

    def __post_init__(self) -> None:
        if self.layout not in SIMPLER_FIRST:
            raise ValueError(f"layout {self.layout!r} is not one of {', '.join(SIMPLER_FIRST)}")
        for name in COUNTS:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        share = self.prefill_share
        if self.layout == "intra" and (share is None or not 0 < share < 1):
            raise ValueError(f"prefill_share must be between 0 and 1, got {share}")
        if self.chunked_prefill_tokens is not None and self.chunked_prefill_tokens < 1:
            raise ValueError(f"chunked_prefill_tokens must be at least 1, got {self.chunked_prefill_tokens}")

    @classmethod
    def of(cls, cand: Candidate, **rest) -> "Deployment":
        """The deployment of `cand` (every Candidate field carries over by name) plus `rest`."""
        return cls(**{f.name: getattr(cand, f.name) for f in fields(Candidate)}, **rest)

    @property
    def unit(self) -> Candidate:
        return Candidate(**{f.name: getattr(self, f.name) for f in fields(Candidate)})

    @property
    def label(self) -> str:
        return self.unit.label

    @property
    def devices(self) -> int:
        """Devices the whole deployment takes: its unit's, times the replicas."""
        return self.unit.devices * self.replicas

    @property
    def prefill_fraction(self) -> float | None:
        """The prefill side's part of a unit (intra: its share; cross: its devices'); None
        for monolithic. What a reference server, which runs cross as one pair, is given."""
        if self.layout == "intra":
            return self.prefill_share
        if self.layout == "cross":
            return self.num_prefill * self.prefill_tp / self.unit.devices
        return None

    def params(self) -> dict:
        """The settings as plain JSON, by their field names: the layout's own, then the
        counts, then what was set of the rest."""
        out = dict(self.unit.params)
        if self.layout == "cross":
            out.update(prefill_tp=self.prefill_tp, decode_tp=self.decode_tp)
        else:
            out["tp"] = self.tp
        out["replicas"] = self.replicas
        for name in ("max_num_seqs", "link"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    @classmethod
    def from_params(cls, layout: str, params: dict, replicas: int | None = None,
                    link: str | None = None) -> "Deployment":
        """The deployment a stored {layout, params} says. replicas, link: an old body's,
        where params lack them. ValueError naming the setting that cannot be read."""
        s = read_params(layout, params)
        if layout == "intra" and s["prefill_share"] is None:
            s["prefill_share"] = 0.5  # the reference server's default split
        if layout != "intra":
            s["prefill_share"] = None  # cross's split is its devices'
        if "replicas" not in (params or {}) and replicas:
            s["replicas"] = replicas
        s["link"] = s["link"] or (None if link is None else str(link))
        return cls(layout=layout, **s)


@dataclass(frozen=True)
class Confidence:
    value: float | None = None  # 0-1
    word: str | None = None     # high | medium | low
    basis: str | None = None    # what it rests on


@dataclass(frozen=True)
class Recommendation:
    """What to run and why. candidates: the ranked rows of the search (plain dicts: label,
    layout, params, max_goodput_rps_per_device, at_goodput, ...); reasons: {text, evidence};
    workload: {name, requests, rate_rps, span_s, and the what-if scales}; profile: {name,
    meta, confidence}; search: {seconds, candidates, simulations, sample_requests}; forecast:
    the outlook over a forecast's horizon, when one was weighed."""

    deployment: Deployment
    max_goodput_rps_per_device: float | None = None
    candidates: tuple = ()
    reasons: tuple = ()
    slo: Slo = field(default_factory=Slo)
    confidence: Confidence = field(default_factory=Confidence)
    margin: float | None = None                   # over the runner-up, relative
    margin_over_other_layout: float | None = None
    runner_up: str | None = None
    decision: str = ""                            # one sentence
    max_devices: int | None = None                # the devices the question allowed (--devices)
    workload: dict = field(default_factory=dict)
    profile: dict = field(default_factory=dict)
    search: dict = field(default_factory=dict)
    cost_per_device_hour: float | None = None
    cost_per_million_output_tokens: float | None = None
    cost_basis: str | None = None                 # where the price comes from, in words
    cost_assumed: bool = False                    # a list price, not one the user gave
    forecast: dict | None = None
    id: int | None = None
    created_s: float | None = None
    host: str | None = None
    applied_s: float | None = None
    applied_target: str | None = None

    @property
    def layout(self) -> str:
        return self.deployment.layout

    @property
    def label(self) -> str:
        return self.deployment.label

    @property
    def workload_name(self) -> str | None:
        return self.workload.get("name")

    @property
    def model(self) -> str | None:
        """The model the profile was measured with, when it says."""
        m = (self.profile.get("meta") or {}).get("model")
        return m if isinstance(m, str) and m else None

    def to_dict(self) -> dict:
        """The JSON form (`recommend --json`, the stored body): layout and params are the
        deployment; label is derived from it."""
        d = self.deployment
        out = {"id": self.id, "layout": d.layout, "label": d.label, "params": d.params(),
               "max_devices": self.max_devices,
               "max_goodput_rps_per_device": self.max_goodput_rps_per_device,
               "candidates": list(self.candidates), "margin": self.margin,
               "margin_over_other_layout": self.margin_over_other_layout,
               "runner_up": self.runner_up,
               "confidence": {"value": self.confidence.value, "word": self.confidence.word,
                              "basis": self.confidence.basis},
               "reasons": list(self.reasons), "slo": self.slo.to_dict(), "profile": self.profile,
               "workload": self.workload, "search": self.search, "decision": self.decision}
        for name in ("cost_per_device_hour", "cost_per_million_output_tokens", "cost_basis", "forecast"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.cost_per_device_hour is not None:
            out["cost_assumed"] = self.cost_assumed
        return out

    @classmethod
    def from_dict(cls, d: dict, **row) -> "Recommendation":
        """The inverse of to_dict, also for bodies stored before this type. row: the row's
        own fields (id, created_s, host, applied_s, applied_target)."""
        layout, params = d.get("layout"), d.get("params") or {}
        max_devices = d.get("max_devices", d.get("devices"))
        replicas = d.get("units")
        if replicas is None and max_devices and layout in SIMPLER_FIRST and "replicas" not in params:
            replicas = int(max_devices) // Deployment.from_params(layout, params).unit.devices
        conf = d.get("confidence") or {}
        return cls(
            deployment=Deployment.from_params(layout, params, replicas or None, d.get("link")),
            max_goodput_rps_per_device=_num(d.get("max_goodput_rps_per_device")),
            candidates=tuple(d.get("candidates") or ()), reasons=tuple(d.get("reasons") or ()),
            slo=_slo(d.get("slo")),
            confidence=Confidence(_num(conf.get("value")), conf.get("word"), conf.get("basis")),
            margin=_num(d.get("margin")),
            margin_over_other_layout=_num(d.get("margin_over_other_layout")),
            runner_up=d.get("runner_up"), decision=d.get("decision") or "",
            max_devices=None if max_devices is None else int(max_devices),
            workload=dict(d.get("workload") or {}), profile=dict(d.get("profile") or {}),
            search=dict(d.get("search") or {}),
            cost_per_device_hour=_num(d.get("cost_per_device_hour")),
            cost_per_million_output_tokens=_num(d.get("cost_per_million_output_tokens")),
            cost_basis=d.get("cost_basis"), cost_assumed=bool(d.get("cost_assumed", False)),
            forecast=d.get("forecast"), **row)


def from_row(row: dict) -> Recommendation:
    """The Recommendation a `recommendations` row holds (Store.recommendation's dict): the
    body where it has a field, else the row's columns (rows written by hand or by older code
    have only those). UserError naming the recommendation when its settings cannot be read."""
    body = row.get("body") or {}
    if isinstance(body, str):
        body = json.loads(body or "{}")
    cols = {"layout": row.get("layout"), "params": row.get("params") or {},
            "candidates": row.get("candidates"), "reasons": row.get("reasons"),
            "slo": row.get("slo"), "margin": row.get("margin"),
            "max_goodput_rps_per_device": row.get("max_goodput_rps_per_device"),
            "confidence": {"value": row.get("confidence"), "word": row.get("confidence_label")},
            "profile": _profile(row.get("profile")), "workload": {"name": row.get("workload")}}
    d = {**cols, **{k: v for k, v in body.items() if v is not None}}
    if isinstance(body.get("workload"), dict):
        d["workload"] = {"name": row.get("workload"), **body["workload"]}
    if "prefill_share" not in d["params"] and row.get("prefill_share") is not None:
        d["params"] = {**d["params"], "prefill_share": row["prefill_share"]}
    ident = {"id": None if row.get("id") is None else int(row["id"]), "host": row.get("host"),
             "created_s": _num(row.get("created_s")), "applied_s": _num(row.get("applied_s")),
             "applied_target": row.get("applied_target")}
    try:
        return Recommendation.from_dict(d, **ident)
    except (TypeError, ValueError, KeyError) as exc:
        raise UserError(f"recommendation {row.get('id')}: layout {d.get('layout')!r} with params "
                        f"{d.get('params')!r} cannot be read ({exc})") from None


def to_row(rec: Recommendation) -> dict:
    """The `recommendations` row that stores `rec` (JSON-safe: NaN and inf as null)."""
    body = clean(rec.to_dict())
    body.pop("id", None)
    return {"host": rec.host or socket.gethostname(), "workload": rec.workload_name,
            "layout": rec.layout, "prefill_share": rec.deployment.prefill_share,
            "confidence": rec.confidence.value, "confidence_label": rec.confidence.word,
            "slo": body["slo"], "params": body["params"], "candidates": body["candidates"],
            "reasons": body["reasons"], "evidence": {"search": body["search"]},
            "max_goodput_rps_per_device": body["max_goodput_rps_per_device"],
            "margin": body["margin"], "profile": rec.profile.get("name"), "body": body}


def save_recommendation(store, rec: Recommendation) -> Recommendation:
    """Store `rec`; returns the stored copy (its id, host and time set; NaN read back as
    None), what every later reader gets."""
    return load_recommendation(store, store.insert_recommendation(to_row(rec)))


def load_recommendation(store, rec_id: int, flag: str = "--recommendation") -> Recommendation:
    """Recommendation `rec_id`, or UserError (exit 2) naming the flag and the missing id."""
    row = store.recommendation(int(rec_id))
    if row is None:
        raise UserError(f"{flag} {rec_id}: no such recommendation in this store "
                        f"(gpuprobe recommend stores one and prints its id)")
    return from_row(row)


def latest_recommendation(store, workload: str | None = None) -> Recommendation | None:
    """The newest recommendation (for `workload` when given), or None."""
    recs = store.recommendations(workload)
    return load_recommendation(store, int(recs["pk"].iloc[-1])) if len(recs) else None


def dumps(rec: Recommendation) -> str:
    """The recommendation as one line of JSON (NaN as null)."""
    return json.dumps(clean(rec.to_dict()))


def clean(x):
    """JSON-safe copy: NaN and inf as None, numpy scalars as Python numbers."""
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _num(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _slo(v) -> Slo:
    """The stored SLO; the chat defaults where a hand-written row has none."""
    if isinstance(v, str):
        v = json.loads(v or "{}")
    if isinstance(v, dict) and "ttft_s" in v and "tbt_s" in v:
        return Slo.from_dict(v)
    return Slo()


def _profile(v) -> dict:
    """The profile column: a name, or (rows written by hand) the profile's JSON."""
    if isinstance(v, str) and v.lstrip().startswith("{"):
        try:
            v = json.loads(v)
        except ValueError:
            return {"name": v}
    if isinstance(v, dict):
        return {"name": v.get("name"), "meta": v.get("meta") or {}}
    return {"name": v} if v else {}
