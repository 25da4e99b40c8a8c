"""Engine plans for a recommendation: which commands, flags and files run the chosen layout on
vLLM, SGLang, NVIDIA Dynamo or gpuprobe's reference server. Plans describe; they run nothing."""
from __future__ import annotations

from pathlib import Path

from gpuprobe.deploy.plans.plan import Plan, render
from gpuprobe.decide.recommendation import Recommendation

ENGINES = ("vllm", "sglang", "dynamo", "gpuprobe")
DEFAULT_SMS = 132  # H100 SXM and H200


def build_plan(rec: Recommendation, engine: str, model: str, target_url: str = "http://127.0.0.1:8000",
               total_sms: int = DEFAULT_SMS) -> Plan:
    from gpuprobe.deploy.plans import dynamo, reference, sglang, vllm
    if engine == "gpuprobe":
        return reference.build(rec, model, total_sms, target_url)
    builders = {"vllm": vllm.build, "sglang": sglang.build, "dynamo": dynamo.build}
    return builders[engine](rec, model, total_sms)


def write_plan(plan: Plan, out_dir: str | Path) -> list[Path]:
    """Write the plan's files into out_dir (created); returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in render(plan).items():
        path = out / name
        path.write_text(text)
        if name.endswith(".sh"):
            path.chmod(0o755)
        paths.append(path)
    return paths
