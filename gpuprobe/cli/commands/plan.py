"""`gpuprobe plan`: the commands and files that run a recommendation on an engine (runs nothing)."""
from __future__ import annotations

import shlex

from gpuprobe.argtypes import http_url, int_at_least, positive_int
from gpuprobe.server.green_partition import SM_GRANULARITY

NAME = "plan"
HELP = ("write the commands and files that run a stored recommendation on vLLM, SGLang, "
        "NVIDIA Dynamo or the reference server (runs nothing)")
ENGINES = ("vllm", "sglang", "dynamo", "gpuprobe")


def add_arguments(p) -> None:
    p.add_argument("--recommendation", required=True, type=positive_int, metavar="ID",
                   help="recommendation id (printed by gpuprobe recommend)")
    p.add_argument("--engine", required=True, choices=ENGINES)
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write the plan into")
    p.add_argument("--model", default=None, metavar="NAME",
                   help="model the engine serves (default: the recommendation profile's model)")
    p.add_argument("--target", type=http_url, default="http://127.0.0.1:8000", metavar="URL",
                   help="reference server the gpuprobe plan switches "
                        "(default http://127.0.0.1:8000)")
    # Green contexts split SMs in groups of 8 and each side keeps one: fewer than two groups
    # wrote a split with negative decode SMs.
    p.add_argument("--total-sms", type=int_at_least(2 * SM_GRANULARITY, f"a group of "
                                                    f"{SM_GRANULARITY} SMs for each side"),
                   default=132, metavar="N",
                   help="SMs of the GPU, for an intra split's green-context counts (default 132: "
                        "H100 SXM, H200)")


def run(args) -> int:
    from gpuprobe.deploy.plans import build_plan, write_plan
    from gpuprobe.decide.recommendation import load_recommendation
    from gpuprobe.errors import UserError
    from gpuprobe.store import Store

    with Store.open(args.store, read_only=True) as store:
        rec = load_recommendation(store, args.recommendation)
    model = args.model or rec.model
    if not model:
        raise UserError(f"recommendation {rec.id} names no model: give --model NAME")
    plan = build_plan(rec, args.engine, model, args.target, args.total_sms)
    try:
        paths = write_plan(plan, args.out)
    except OSError as exc:
        raise UserError(f"--out {args.out}: cannot write there ({exc.strerror})") from None
    print(f"plan for recommendation {rec.id} ({rec.layout}) on {plan.engine} {plan.version}: "
          f"{plan.summary}")
    for line in plan.setup:
        print(f"  {line}")
    for proc in plan.processes:
        env = "".join(f"{k}={shlex.quote(v)} " for k, v in proc.env)
        print(f"  {env}{shlex.join(proc.argv)}")
    print("written (nothing was run): " + ", ".join(str(p) for p in paths))
    return 0
