"""Every `vllm serve` line a plan writes, for every layout, and every vLLM engine argument the
Dynamo plan passes through, is parsed by vLLM's own engine-args parser (the installed vLLM in
.vllm-venv, which `make test` builds once; $GPUPROBE_VLLM_PYTHON names another), the version
the plans cite. One subprocess: importing vLLM takes seconds."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprobe.deploy.plans import build_plan
from gpuprobe.deploy.plans import vllm as vllm_plan

sys.path.insert(0, str(Path(__file__).parent))
from test_plan_flags import TARGETS  # noqa: E402  the same layouts the allowlist test covers

ROOT = Path(__file__).resolve().parent.parent
# the stamp, not the venv: a venv whose install broke off has no importable vLLM
INSTALLED = os.environ.get("GPUPROBE_VLLM_PYTHON") or (
    (ROOT / ".vllm-venv" / ".vllm-installed").exists() and str(ROOT / ".vllm-venv" / "bin" / "python"))
VLLM_PYTHON = INSTALLED or ""
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
DYNAMO_OWN = {"--model", "--disaggregation-mode"}  # dynamo.vllm's, not vLLM's


def lines() -> list[dict]:
    out = []
    for case, t in sorted(TARGETS.items()):
        for engine in ("vllm", "dynamo"):
            for p in build_plan(t, engine, "Qwen/Qwen3-0.6B").processes:
                argv = list(p.argv)
                if p.program == "vllm serve":
                    out.append({"name": f"{case} {p.name}", "argv": argv[2:], "env": list(p.env)})
                elif p.program == "dynamo.vllm":  # engine args after dynamo's own
                    model = argv[argv.index("--model") + 1]
                    rest, i = [], 3
                    while i < len(argv):
                        if argv[i] in DYNAMO_OWN:
                            i += 2
                            continue
                        rest.append(argv[i])
                        i += 1
                    out.append({"name": f"{case} dynamo {p.name}", "argv": [model, *rest],
                                "env": list(p.env)})
    return out


def parse(payload) -> dict:
    proc = subprocess.run([VLLM_PYTHON, str(Path(__file__).parent / "vllm_parse_check.py")],
                          input=json.dumps(payload), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.timeout(660)
def test_plan_lines_pass_vllms_own_parser():
    if not VLLM_PYTHON:
        pytest.skip("no vLLM to parse with: `make vllm-venv` builds .vllm-venv")
    items = lines()
    bad = {"name": "made-up flag", "argv": ["m", "--prefill-only"], "env": []}
    role = {"name": "bad role", "argv": ["m", "--kv-transfer-config",
                                         '{"kv_connector":"NixlConnector","kv_role":"prefill"}'],
            "env": [("VLLM_MADE_UP", "1")]}
    cited = FLAG.findall(" ".join(vllm_plan.SOURCES))
    out = parse({"lines": items + [bad, role], "flags": cited + ["--made-up-flag"]})
    assert "v" + out["version"] == vllm_plan.VERSION  # the version the plans cite is the one parsing
    results = {r["name"]: r["error"] for r in out["results"]}
    assert len(items) >= 20 and not {n: e for n, e in results.items()
                                     if e and n not in ("made-up flag", "bad role")}
    # the check can fail: an unknown flag, a role vLLM does not have
    assert "unrecognized arguments: --prefill-only" in results["made-up flag"]
    assert "kv_role" in results["bad role"]
    assert out["unknown_flags"] == ["--made-up-flag"]
