"""The layouts `recommend` weighs: monolithic (prefill-first, or chunked prefill at several
token budgets), intra at prefill shares 0.1-0.9, cross as xPyD within the devices given.

A Candidate is one unit of a deployment: one device for monolithic and intra, x + y devices
for cross. `devices` devices run as many units as fit, each taking an equal share of the load,
so a unit's goodput per device is the deployment's. Its field names are the settings' names
everywhere (gpuprobe.decide.recommendation.Deployment adds what a whole deployment has).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpuprobe.errors import UserError

CHUNK_BUDGETS = (512, 2048, 8192)  # tokens per step: vLLM's range, low to high (each costs search time)
INTRA_SHARES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
MAX_CROSS_DEVICES = 8  # xPyD pairs beyond one host's 8 GPUs are out of scope
SIMPLER_FIRST = ("monolithic", "intra", "cross")


@dataclass(frozen=True)
class Candidate:
    layout: str                                # 'monolithic' | 'intra' | 'cross'
    chunked_prefill_tokens: int | None = None  # monolithic: prefill budget per step (None: prefill-first)
    prefill_share: float | None = None         # intra: the prefill worker's share of the device
    num_prefill: int = 1                       # cross: x prefill workers
    num_decode: int = 1                        # cross: y decode workers
    prefill_tp: int = 1                        # cross: devices per prefill worker (tensor parallel)
    decode_tp: int = 1                         # cross: devices per decode worker
    tp: int = 1                                # monolithic, intra: devices per engine (group)

    @property
    def devices(self) -> int:
        if self.layout == "cross":
            return self.num_prefill * self.prefill_tp + self.num_decode * self.decode_tp
        return self.tp

    @property
    def label(self) -> str:
        tp = f" TP{self.tp}" if self.tp > 1 else ""
        if self.layout == "monolithic":
            return (f"monolithic{tp}" if self.chunked_prefill_tokens is None
                    else f"monolithic{tp} chunked {self.chunked_prefill_tokens}")
        if self.layout == "intra":
            return f"intra{tp} {self.prefill_share:.0%} prefill"
        if self.prefill_tp == self.decode_tp == 1:
            return f"cross {self.num_prefill}P{self.num_decode}D"
        return (f"cross {self.num_prefill}P(TP{self.prefill_tp})"
                f"{self.num_decode}D(TP{self.decode_tp})")

    @property
    def params(self) -> dict:
        """The settings of this layout, by their field names (plain JSON)."""
        if self.layout == "monolithic":
            return {"chunked_prefill_tokens": self.chunked_prefill_tokens, "tp": self.tp}
        if self.layout == "intra":
            return {"prefill_share": self.prefill_share, "tp": self.tp}
        return {"num_prefill": self.num_prefill, "num_decode": self.num_decode,
                "prefill_tp": self.prefill_tp, "decode_tp": self.decode_tp}

    @property
    def simplicity(self) -> tuple:
        """Sort key: simpler first (layout, then fewer devices, then the default scheduler)."""
        return (SIMPLER_FIRST.index(self.layout), self.devices,
                self.chunked_prefill_tokens is not None, self.label)

    @classmethod
    def from_dict(cls, d: dict) -> "Candidate":
        """A candidate row ({layout, params}) back as the Candidate it was made from."""
        s = read_params(d["layout"], d.get("params") or {})
        return cls(d["layout"], s["chunked_prefill_tokens"], s["prefill_share"],
                   s["num_prefill"], s["num_decode"], s["prefill_tp"], s["decode_tp"], s["tp"])


def at_profile_tp(cand: Candidate, profile) -> Candidate:
    """`cand` at the TP sizes of `profile`'s own workers: the profile as it is (simulate's
    and the autopilot's window candidates), where a search weighs other sizes."""
    if cand.layout == "cross":
        return replace(cand, prefill_tp=profile.worker("cross", "prefill").tp,
                       decode_tp=profile.worker("cross", "decode").tp)
    return replace(cand, tp=profile.worker(cand.layout, "mixed" if cand.layout == "monolithic"
                                           else "prefill").tp)


def read_params(layout: str, params: dict) -> dict:
    """{setting: value} from a stored `params` dict, defaults filled in. Rows written before
    one name per setting said a chunk budget as chunked_prefill + max_num_batched_tokens;
    they are read here and nowhere else. ValueError (naming the setting) on a value of the
    wrong kind."""
    p = dict(params or {})
    chunk = p.get("chunked_prefill_tokens")
    if chunk is None and p.get("chunked_prefill"):
        chunk = p.get("max_num_batched_tokens")
    out = {"chunked_prefill_tokens": _int(chunk, "chunked_prefill_tokens") if layout == "monolithic" else None,
           "prefill_share": _float(p.get("prefill_share"), "prefill_share") if layout != "monolithic" else None,
           "max_num_seqs": _int(p.get("max_num_seqs"), "max_num_seqs"),
           "link": None if p.get("link") is None else str(p["link"])}
    for name in ("num_prefill", "num_decode", "prefill_tp", "decode_tp", "tp", "replicas"):
        n = _int(p.get(name), name)
        out[name] = 1 if n is None else n
    return out


def _int(v, name: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or float(v) != int(float(v)):
        raise ValueError(f"{name} must be a whole number, got {v!r}")
    return int(float(v))


def _float(v, name: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool):
        raise ValueError(f"{name} must be a number, got {v!r}")
    return float(v)


def candidates(devices: int, layouts=SIMPLER_FIRST, tp_sizes: dict | None = None,
               whole: bool = True) -> list[Candidate]:
    """Every unit to weigh for `devices` devices, simplest first. tp_sizes: the TP sizes each
    side can run at, {'monolithic', 'intra', 'cross.prefill', 'cross.decode': (sizes)}
    (default TP1 everywhere). whole: only units whose devices divide `devices`, so that copies
    of one lay them all out; else every unit within them. An xPyD unit whose x and y share a
    factor is that many copies of a smaller one, which is weighed instead."""
    if devices < 1:
        raise UserError(f"--devices must be at least 1, got {devices}")
    sizes = {"monolithic": (1,), "intra": (1,), "cross.prefill": (1,), "cross.decode": (1,),
             **(tp_sizes or {})}

    def fits(n: int) -> bool:
        return devices % n == 0 if whole else n <= devices

    out: list[Candidate] = []
    if "monolithic" in layouts:
        out += [Candidate("monolithic", b, tp=tp) for tp in sizes["monolithic"] if fits(tp)
                for b in (None, *CHUNK_BUDGETS)]
    if "intra" in layouts:
        out += [Candidate("intra", prefill_share=s, tp=tp) for tp in sizes["intra"] if fits(tp)
                for s in INTRA_SHARES]
    if "cross" in layouts:
        units = [Candidate("cross", num_prefill=x, num_decode=y, prefill_tp=p, decode_tp=d)
                 for p in sizes["cross.prefill"] for d in sizes["cross.decode"]
                 for x in range(1, MAX_CROSS_DEVICES) for y in range(1, MAX_CROSS_DEVICES)
                 if math.gcd(x, y) == 1 and x * p + y * d <= MAX_CROSS_DEVICES]
        out += sorted((c for c in units if fits(c.devices)),
                      key=lambda c: (c.devices, c.prefill_tp, c.decode_tp, c.num_prefill))
    return out
