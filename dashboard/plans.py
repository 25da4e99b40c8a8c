"""The plans a recommendation comes with, as text to copy: {engine: text}, from `gpuprobe
plan`'s builders (they run nothing)."""
from __future__ import annotations

from gpuprobe.deploy.plans import ENGINES, build_plan, render
from gpuprobe.decide.recommendation import Recommendation

SHOWN_AFTER = ("README.md", "plan.json")  # the page shows the commands and the files they need


def plans_for(rec: Recommendation) -> tuple[dict[str, str], str | None]:
    """({engine: text}, a line saying what is missing, or None)."""
    model = rec.model or "MODEL"
    out = {}
    for engine in ENGINES:
        files = render(build_plan(rec, engine, model))
        out[engine] = "\n\n".join(text if name == "launch.sh" else f"# {name}\n{text}"
                                  for name, text in files.items() if name not in SHOWN_AFTER)
    why = None if rec.model else "The recommendation names no model: replace MODEL in the commands."
    return out, why
