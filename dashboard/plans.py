"""The plans a recommendation comes with, as text to copy: {engine: text}, from `gpuprobe
plan`'s builders (run nothing); the recommendation's stored "plans" when its body has them."""
from __future__ import annotations

import json

SHOWN_AFTER = ("README.md", "plan.json")  # the page shows the commands and the files they need


def plans_for(rec: dict) -> tuple[dict[str, str], str | None]:
    """({engine: text}, a line saying what is missing, or None)."""
    stored = (rec.get("body") or {}).get("plans")
    if stored:
        return {str(k): _text(v) for k, v in (stored.items() if isinstance(stored, dict) else enumerate(stored))}, None
    try:
        from gpuprobe.decide.plans import ENGINES, build_plan, render
        from gpuprobe.decide.rec_params import target_of
    except ImportError:
        return {}, "Plans are not available in this build (gpuprobe.decide.plans is missing)."
    from gpuprobe.errors import GpuprobeError
    try:
        t = target_of(rec)
    except GpuprobeError as exc:
        return {}, f"No plans: {exc}"
    model = t.model or "MODEL"
    out = {}
    for engine in ENGINES:
        files = render(build_plan(t, engine, model))
        out[engine] = "\n\n".join(text if name == "launch.sh" else f"# {name}\n{text}"
                                  for name, text in files.items() if name not in SHOWN_AFTER)
    why = None if t.model else "The recommendation names no model: replace MODEL in the commands."
    return out, why


def _text(v) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and all(isinstance(x, str) for x in v.values()):
        return "\n\n".join(f"# {k}\n{x}" for k, x in v.items())
    return json.dumps(v, indent=2)
