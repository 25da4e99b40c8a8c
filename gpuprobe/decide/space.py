"""What a search weighs for `--devices` devices: the units at the TP sizes whose model fits,
laid out over all the devices where a unit divides them, and why any size or device is left.

    space = layout_space(profile, devices=8, layouts=SIMPLER_FIRST)
    space.candidates    # Candidates, simplest first; copies of one fill the devices
    space.refused       # ({"workers", "tp", "why"}, ...): sizes whose model does not fit
    space.idle          # None, or the one line saying why some devices stay idle

The TP sizes come from the profile (perf/tp_family.py): a spec profile carries its workers at
TP 1/2/4/8, a measured one only the TP it ran at.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.decide.candidates import SIMPLER_FIRST, Candidate, candidates
from gpuprobe.errors import UserError
from gpuprobe.perf.costmodel import Profile
from gpuprobe.perf.tp_family import refusal, tp_options

# which workers a side's TP size needs: intra runs both engines on the group
SIDE_WORKERS = {"monolithic": ("monolithic",), "intra": ("intra.prefill", "intra.decode"),
                "cross.prefill": ("cross.prefill",), "cross.decode": ("cross.decode",)}


@dataclass(frozen=True)
class Space:
    candidates: tuple[Candidate, ...]
    refused: tuple[dict, ...] = ()
    idle: str | None = None

    def refused_lines(self) -> list[str]:
        """One line per distinct reason: the sides and sizes it covers, and the numbers."""
        by_why: dict[str, list[str]] = {}
        for r in self.refused:
            by_why.setdefault(r["why"], []).append(f"{r['workers']} TP{r['tp']}")
        return [f"{', '.join(what)} left out: {why}" for why, what in by_why.items()]


def layout_space(profile: Profile, devices: int, layouts=SIMPLER_FIRST) -> Space:
    """The candidates for `devices` devices (see module doc). UserError when no unit fits
    within them, naming the memory that refused each size."""
    if devices < 1:
        raise UserError(f"--devices must be at least 1, got {devices}")
    options = tp_options(profile)
    sizes: dict[str, tuple[int, ...]] = {}
    refused: list[dict] = []
    for side, keys in SIDE_WORKERS.items():
        layout = side.split(".")[0]
        ok = []
        for tp in sorted({t for k in keys for t in options[k]}):
            if tp > devices or layout not in layouts:
                continue
            why = next((refusal(options[k][tp]) for k in keys
                        if tp in options[k] and refusal(options[k][tp])), None)
            if why is not None:
                refused.append({"workers": side, "tp": tp, "why": why})
            elif all(tp in options[k] for k in keys):
                ok.append(tp)
        sizes[side] = tuple(ok)
    cands = candidates(devices, layouts, sizes)
    idle = None
    if not cands:
        cands = candidates(devices, layouts, sizes, whole=False)
        if cands:
            smallest = min(c.devices for c in cands)
            idle = (f"no unit that fits divides {devices} devices (the smallest takes "
                    f"{smallest}): each answer leaves {devices} mod its unit idle")
    if not cands:
        lines = Space((), tuple(refused)).refused_lines()
        raise UserError(f"no layout fits {devices} device(s)"
                        + (": " + "; ".join(lines) if lines else ""))
    return Space(tuple(cands), _merge(refused), idle)


def _merge(refused: list[dict]) -> tuple[dict, ...]:
    """cross.prefill and cross.decode refused alike (one GPU) read as cross."""
    out, seen = [], set()
    for r in refused:
        side = "cross" if r["workers"].startswith("cross.") else r["workers"]
        key = (side, r["tp"], r["why"])
        if key not in seen:
            seen.add(key)
            out.append({**r, "workers": side})
    return tuple(out)
