"""A plan as plain data (the processes to start, with flags and environment) and its files.

A plan only describes; nothing here starts a process. `render` turns it into the files that
`gpuprobe plan --out DIR` writes: launch.sh (every command, in order), README.md (what, why,
from which documentation), plan.json (the same, for programs), plus engine files such as a
Dynamo graph.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from gpuprobe.decide.recommendation import Recommendation


@dataclass(frozen=True)
class Process:
    """One command. `program` names the documented interface its flags come from (the key of
    tests/fixtures/engine_flags.json), so each flag can be checked against that table."""

    name: str
    program: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    background: bool = True  # a server left running; the last foreground one ends the script

    def flags(self) -> list[str]:
        return [a.split("=", 1)[0] for a in self.argv if a.startswith("--")]

    def line(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env)
        words = [shlex.quote(a) for a in self.argv]
        body = " \\\n    ".join(_group(words))
        return (f"{env} " if env else "") + body + (" &" if self.background else "")


@dataclass(frozen=True)
class Plan:
    engine: str
    rec: Recommendation
    version: str  # the engine version whose documentation the flags were checked against
    sources: tuple[str, ...]  # documentation pages the flags come from
    summary: str  # one sentence: what runs where
    processes: tuple[Process, ...]
    setup: tuple[str, ...] = ()  # shell lines before the processes (an MPS daemon)
    notes: tuple[str, ...] = ()
    files: dict = field(default_factory=dict)  # extra files: name -> text

    def to_dict(self) -> dict:
        d = self.rec.deployment
        return {"engine": self.engine, "recommendation": self.rec.id,
                "deployment": {"layout": d.layout, **d.params(), "devices": d.devices},
                "version": self.version,
                "sources": list(self.sources), "summary": self.summary,
                "setup": list(self.setup), "notes": list(self.notes),
                "processes": [{"name": p.name, "program": p.program, "argv": list(p.argv),
                               "env": dict(p.env), "background": p.background}
                              for p in self.processes],
                "files": sorted(self.files)}


def _group(words: list[str]) -> list[str]:
    """Words as lines: the program and its positional words first, then one flag with its
    values per line, so a long command reads as a list of settings."""
    lines: list[list[str]] = [[]]
    for w in words:
        if w.startswith("--") and lines[-1]:
            lines.append([])
        lines[-1].append(w)
    return [" ".join(x) for x in lines]


def render(plan: Plan) -> dict[str, str]:
    """{file name: text} for everything the plan writes."""
    rec = plan.rec
    head = (f"# gpuprobe plan: recommendation {rec.id} ({rec.workload_name or 'workload'}: {rec.layout})"
            f" on {plan.engine} {plan.version}\n# Written by `gpuprobe plan`; nothing has been "
            f"run. Flags checked against:\n" + "".join(f"#   {s}\n" for s in plan.sources))
    sh = ["#!/usr/bin/env bash", head.rstrip("\n"), "set -euo pipefail", ""]
    sh += list(plan.setup) + ([""] if plan.setup else [])
    for p in plan.processes:
        sh += [f"# {p.name}", p.line(), ""]
    if any(p.background for p in plan.processes):
        sh.append("wait")
    readme = [f"# Plan: recommendation {rec.id} on {plan.engine}", "",
              plan.summary, "",
              f"Checked against {plan.engine} {plan.version} documentation:", ""]
    readme += [f"- {s}" for s in plan.sources]
    readme += ["", "## Commands (launch.sh)", "", "```sh"]
    readme += list(plan.setup) + [p.line() for p in plan.processes] + ["```"]
    if plan.files:
        readme += ["", "## Files", ""] + [f"- `{name}`" for name in sorted(plan.files)]
    if plan.notes:
        readme += ["", "## Notes", ""] + [f"- {n}" for n in plan.notes]
    out = {"launch.sh": "\n".join(sh) + "\n", "README.md": "\n".join(readme) + "\n",
           "plan.json": json.dumps(plan.to_dict(), indent=2) + "\n"}
    out.update(plan.files)
    return out
