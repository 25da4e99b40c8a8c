"""The layouts `recommend` weighs: monolithic (prefill-first, or chunked prefill at several
token budgets), intra at prefill shares 0.1-0.9, cross as xPyD within the devices given.

A Candidate is one unit of a deployment: one device for monolithic and intra, x + y devices
for cross. `devices` devices run as many units as fit, each taking an equal share of the load,
so a unit's goodput per device is the deployment's.
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
    layout: str                          # 'monolithic' | 'intra' | 'cross'
    chunked_tokens: int | None = None    # monolithic: chunked prefill budget (None: prefill-first)
    prefill_share: float | None = None   # intra: the prefill worker's share of the device
    num_prefill: int = 1                 # cross: x prefill devices
    num_decode: int = 1                  # cross: y decode devices

    @property
    def devices(self) -> int:
        return self.num_prefill + self.num_decode if self.layout == "cross" else 1

    @property
    def label(self) -> str:
        if self.layout == "monolithic":
            return ("monolithic" if self.chunked_tokens is None
                    else f"monolithic chunked {self.chunked_tokens}")
        if self.layout == "intra":
            return f"intra {self.prefill_share:.0%} prefill"
        return f"cross {self.num_prefill}P{self.num_decode}D"

    @property
    def params(self) -> dict:
        """What a plan needs to configure it (plain JSON)."""
        if self.layout == "monolithic":
            return {"chunked_prefill": self.chunked_tokens is not None,
                    "max_num_batched_tokens": self.chunked_tokens}
        if self.layout == "intra":
            return {"prefill_share": self.prefill_share}
        return {"num_prefill": self.num_prefill, "num_decode": self.num_decode}

    @property
    def simplicity(self) -> tuple:
        """Sort key: simpler first (layout, then fewer devices, then the default scheduler)."""
        return (SIMPLER_FIRST.index(self.layout), self.devices, self.chunked_tokens is not None,
                self.label)

    @classmethod
    def from_dict(cls, d: dict) -> "Candidate":
        p = d.get("params", {})
        return cls(d["layout"], p.get("max_num_batched_tokens") if p.get("chunked_prefill") else None,
                   p.get("prefill_share"), int(p.get("num_prefill", 1)), int(p.get("num_decode", 1)))


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
