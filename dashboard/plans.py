"""The plans a recommendation comes with, as text to copy: {engine: text}.

From the recommendation's stored body ("plans") when `recommend` kept them; else from
`gpuprobe plan` when this build has it (run into a temporary folder; it runs nothing else);
the reference server's admin call is always derived here from the recommendation itself.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from gpuprobe.dashboard.apply import layout_body

ENGINES = ("vllm", "sglang", "dynamo")


def plans_for(store_path: str, rec: dict) -> tuple[dict[str, str], str | None]:
    """({engine: text}, a line saying what is missing or None)."""
    plans, why = {}, None
    stored = (rec.get("body") or {}).get("plans")
    if stored:
        plans = {str(k): _text(v) for k, v in (stored.items() if isinstance(stored, dict) else enumerate(stored))}
    elif importlib.util.find_spec("gpuprobe.cli.commands.plan") is not None:
        plans = {e: _run_plan(store_path, int(rec["id"]), e) for e in ENGINES}
    else:
        why = ("Plans for vLLM, SGLang and Dynamo are not available in this build (`gpuprobe plan` is "
               "missing); the reference server's call is below.")
    plans.setdefault("gpuprobe", admin_call(rec))
    return plans, why


def admin_call(rec: dict) -> str:
    body = json.dumps(layout_body(rec))
    return ("# switch a running gpuprobe reference server (its --admin-token-file)\n"
            f"curl -s -H \"Authorization: Bearer $(cat token.txt)\" http://127.0.0.1:8000/admin/layout "
            f"-d '{body}'")


def _text(v) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and all(isinstance(x, str) for x in v.values()):
        return "\n\n".join(f"# {k}\n{x}" for k, x in v.items())
    return json.dumps(v, indent=2)


def _run_plan(store_path: str, rec_id: int, engine: str) -> str:
    with tempfile.TemporaryDirectory(prefix="gpuprobe-plan-") as out:
        done = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "plan", "--store", store_path,
                               "--recommendation", str(rec_id), "--engine", engine, "--out", out],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            return f"# gpuprobe plan failed (exit {done.returncode}): {done.stderr.strip()[-500:]}"
        files = sorted(p for p in Path(out).rglob("*") if p.is_file())
        return "\n\n".join(f"# {p.relative_to(out)}\n{p.read_text(errors='replace')}" for p in files) \
            or done.stdout
