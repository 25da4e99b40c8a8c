"""SLO presets and the `--slo` text: a preset name or `ttft_p99=2s,tpot_p90=50ms,attain=0.9`.

Keys, as vLLM's benchmarks, AIConfigurator and guidellm name them (gpuprobe.perf.metrics):
`ttft` (time to first token), `tpot` (each request's mean time per output token), each
optionally with a percentile over requests (`ttft_p99`, `tpot_p90`); `itl_pNN` (every gap
between tokens pooled: inter-token latency, at a percentile); `attain`. Plain `ttft` / `tpot`
set only the per-request targets the attainment counts; a percentile makes it a condition too.

Older spellings, mapped explicitly: `tbt=X` was the per-request mean target, now `tpot=X`;
`tbt_pNN=X` held both each request's mean and the pooled gaps' pNN to X, now `tpot=X,itl_pNN=X`.
Values and sources of the presets: docs/decide.md, "SLO presets".
"""
from __future__ import annotations

import re

from gpuprobe.errors import UserError
from gpuprobe.perf.metrics import PERCENTILES, Slo
from gpuprobe.units import parse_duration

SLO_PRESETS: dict[str, Slo] = {
    # DistServe's chatbot TPOT (0.1 s) and 90% attainment; MLPerf Inference's Llama-2-70B
    # server-scenario TTFT bound (2 s). The project's one set of defaults (Slo()).
    "chat": Slo(2.0, 0.1, 0.9, name="chat"),
    # DistServe's code-completion targets (HumanEval): a fast first token, a looser TPOT.
    "code": Slo(0.125, 0.2, 0.9, name="code"),
    # DistServe's summarization targets (LongBench): long prompts, a slow first token is fine.
    "summarize": Slo(15.0, 0.15, 0.9, name="summarize"),
    # Offline work: no source sets latency bounds (MLPerf's offline scenario has none); bounds
    # loose enough that throughput decides, kept finite so a stalled request still counts.
    "batch": Slo(600.0, 1.0, 0.99, name="batch"),
}
_KEY = re.compile(r"^(ttft|tpot|itl|tbt)(?:_p(\d+))?$")
HINT = "use ttft[_pNN]=DURATION, tpot[_pNN]=DURATION, itl_pNN=DURATION or attain=FRACTION"


def parse_slo(text: str | None) -> Slo:
    """A preset name or comma-separated key=value pairs (module docstring; missing keys from
    `chat`). UserError on bad text."""
    if text is None or not text.strip():
        return SLO_PRESETS["chat"]
    text = text.strip()
    if text in SLO_PRESETS:
        return SLO_PRESETS[text]
    if "=" not in text:
        raise UserError(f"--slo {text!r}: not a preset ({', '.join(SLO_PRESETS)}) "
                        "nor key=value pairs like ttft_p99=2s,tpot_p90=50ms,attain=0.9")
    base = SLO_PRESETS["chat"]
    vals: dict = {"ttft_s": base.ttft_s, "tpot_s": base.tpot_s, "attain": base.attain,
                  "ttft_pct": None, "tpot_pct": None, "itl_s": None, "itl_pct": None}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        key, value = key.strip().lower(), value.strip()
        if key == "attain":
            vals["attain"] = _fraction(value)
            continue
        m = _KEY.match(key)
        if not m or not value:
            raise UserError(f"--slo: {part!r}: {HINT}")
        name, pct = m.group(1), int(m.group(2)) if m.group(2) else None
        if pct is not None and pct not in PERCENTILES:
            raise UserError(f"--slo: {key}: percentile must be one of "
                            f"{', '.join(f'p{p}' for p in PERCENTILES)}")
        seconds = _seconds(value, key)
        if name == "itl" and pct is None:
            raise UserError(f"--slo: {part!r}: ITL pools every gap, so it needs a percentile "
                            f"(itl_p99={value}); a per-request target is tpot={value}")
        if name == "tbt":  # the older spelling: see the module docstring
            vals["tpot_s"] = seconds
            if pct is not None:
                vals["itl_s"], vals["itl_pct"] = seconds, pct
            continue
        vals[f"{name}_s"], vals[f"{name}_pct"] = seconds, pct
    return Slo(**vals, name=text)


def slo_from_flags(slo: str | None, ttft_s: float | None, tpot_s: float | None) -> Slo:
    """--slo, with --slo-ttft / --slo-tpot (seconds) overriding its per-request targets, as
    simulate, recommend and validate take them."""
    from dataclasses import replace
    out = parse_slo(slo)
    if ttft_s is not None or tpot_s is not None:
        out = replace(out, ttft_s=ttft_s or out.ttft_s, tpot_s=tpot_s or out.tpot_s,
                      name=f"{out.name} (--slo-ttft/--slo-tpot)")
    return out


def _seconds(value: str, key: str) -> float:
    s = parse_duration(value, f"--slo: {key}")
    if not s > 0:
        raise UserError(f"--slo: {key} must be > 0")
    return float(s)


def _fraction(value: str) -> float:
    try:
        v = float(value.rstrip("%")) / (100.0 if value.endswith("%") else 1.0)
    except ValueError:
        raise UserError(f"--slo: attain={value!r} is not a fraction (0.9 or 90%)") from None
    if not 0 < v <= 1:
        raise UserError(f"--slo: attain must be in (0, 1], got {value}")
    return v
