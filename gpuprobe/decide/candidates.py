"""The layouts `recommend` weighs: monolithic (prefill-first, or chunked prefill at several
token budgets), intra at prefill shares 0.1-0.9, cross as xPyD within the devices given.

A Candidate is one unit of a deployment: one device for monolithic and intra, x + y devices
for cross. `devices` devices run as many units as fit, each taking an equal share of the load,
so a unit's goodput per device is the deployment's. Its field names are the settings' names
everywhere (gpuprobe.decide.recommendation.Deployment adds what a whole deployment has).
"""
from __future__ import annotations

from dataclasses import dataclass

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
    num_prefill: int = 1                       # cross: x prefill workers (one device each)
    num_decode: int = 1                        # cross: y decode workers

    @property
    def devices(self) -> int:
        return self.num_prefill + self.num_decode if self.layout == "cross" else 1

    @property
    def label(self) -> str:
        if self.layout == "monolithic":
            return ("monolithic" if self.chunked_prefill_tokens is None
                    else f"monolithic chunked {self.chunked_prefill_tokens}")
        if self.layout == "intra":
            return f"intra {self.prefill_share:.0%} prefill"
        return f"cross {self.num_prefill}P{self.num_decode}D"

    @property
    def params(self) -> dict:
        """The settings of this layout, by their field names (plain JSON)."""
        if self.layout == "monolithic":
            return {"chunked_prefill_tokens": self.chunked_prefill_tokens}
        if self.layout == "intra":
            return {"prefill_share": self.prefill_share}
        return {"num_prefill": self.num_prefill, "num_decode": self.num_decode}

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
                   s["num_prefill"], s["num_decode"])


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


def candidates(devices: int, layouts=SIMPLER_FIRST) -> list[Candidate]:
    """Every candidate that fits `devices` devices, simplest first."""
    if devices < 1:
        raise UserError(f"--devices must be at least 1, got {devices}")
    out: list[Candidate] = []
    if "monolithic" in layouts:
        out += [Candidate("monolithic")] + [Candidate("monolithic", b) for b in CHUNK_BUDGETS]
    if "intra" in layouts:
        out += [Candidate("intra", prefill_share=s) for s in INTRA_SHARES]
    if "cross" in layouts:
        n = min(devices, MAX_CROSS_DEVICES)
        out += [Candidate("cross", num_prefill=x, num_decode=t - x)
                for t in range(2, n + 1) for x in range(1, t)]
    return out
