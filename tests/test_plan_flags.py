"""Every flag, environment variable and config key a vLLM, SGLang or Dynamo plan emits is one
the engine documents (tests/fixtures/engine_flags.json, with the pages and version read), for
every layout; the gpuprobe plan's flags are the ones our own CLI parses. `vllm serve` lines are
left to vLLM's own parser (test_plan_vllm_parser.py)."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from gpuprobe.deploy.plans import build_plan, render
from gpuprobe.deploy.plans.plan import Process
from gpuprobe.decide.recommendation import Deployment, Recommendation

TABLE = json.loads((Path(__file__).parent / "fixtures" / "engine_flags.json").read_text())
DEPLOYMENTS = {
    "mono-chunked-2dev": Deployment("monolithic", 512, max_num_seqs=128, replicas=2),
    "mono-whole": Deployment("monolithic", max_num_seqs=256),
    "intra": Deployment("intra", prefill_share=0.35),
    "cross-1p1d-nvlink": Deployment("cross", link="nvlink"),
    "cross-2p3d-ib": Deployment("cross", num_prefill=2, num_decode=3, link="ib"),
    "cross-1p2d-tcp": Deployment("cross", num_decode=2, link="tcp"),
    "mono-tp2-x4": Deployment("monolithic", 2048, tp=2, replicas=4),
    "cross-2p1d-tp1-2-x2": Deployment("cross", num_prefill=2, num_decode=1, prefill_tp=1,
                                      decode_tp=2, replicas=2, link="nvlink"),
}
TARGETS = {case: Recommendation(d, id=i, workload={"name": "w"})
           for i, (case, d) in enumerate(DEPLOYMENTS.items(), 1)}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def undocumented(engine: str, proc: Process) -> list[str]:
    """Names in `proc` the table does not list for its engine and program."""
    doc = TABLE[engine]
    if proc.program == "vllm serve":
        return []  # vLLM's own parser checks these (test_plan_vllm_parser.py)
    bad = [f"{proc.program} {f}" for f in proc.flags()
           if f not in doc["programs"].get(proc.program, [])]
    bad += [f"env {k}" for k, _ in proc.env if k not in doc["env"]]
    argv = list(proc.argv)
    for i, a in enumerate(argv[:-1]):
        if a == "--kv-transfer-config":
            cfg = json.loads(argv[i + 1])
            for key, value in cfg.items():
                allowed = doc["kv_transfer_config"].get(key)
                if allowed is None or value not in allowed:
                    bad.append(f"kv-transfer-config {key}={value}")
        if a in doc.get("values", {}) and argv[i + 1] not in doc["values"][a]:
            bad.append(f"{a} {argv[i + 1]}")
    return bad


def test_the_check_catches_an_undocumented_flag():
    fake = Process("x", "dynamo.vllm", ("python", "-m", "dynamo.vllm", "--prefill-only"),
                   (("VLLM_MADE_UP", "1"),))
    assert undocumented("dynamo", fake) == ["dynamo.vllm --prefill-only", "env VLLM_MADE_UP"]
    role = Process("x", "dynamo.vllm", ("python", "-m", "dynamo.vllm", "--kv-transfer-config",
                                        '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'))
    assert undocumented("dynamo", role) == ["kv-transfer-config kv_role=kv_both"]  # deprecated


@pytest.mark.parametrize("engine", ["vllm", "sglang", "dynamo"])
@pytest.mark.parametrize("case", sorted(TARGETS))
def test_plan_uses_only_documented_names(engine, case):
    t = TARGETS[case]
    plan = build_plan(t, engine, "Qwen/Qwen3-0.6B")
    doc = TABLE[engine]
    assert plan.version == doc["version"]
    bad = [b for p in plan.processes for b in undocumented(engine, p)]
    assert not bad, bad
    files = render(plan)
    for name in ("launch.sh", "README.md"):
        assert doc["version"] in files[name], name  # the version is cited where people read
    union = {f for flags in doc["programs"].values() for f in flags}
    if engine == "vllm":  # vLLM's parser checks these names (test_plan_vllm_parser.py)
        union |= set(FLAG.findall(" ".join(plan.sources))) | {
            f for p in plan.processes if p.program == "vllm serve" for f in p.flags()}
    written = set(FLAG.findall(files["launch.sh"] + files.get("dynamo_graph.yaml", "")))
    assert written <= union, written - union
    for line in plan.setup:
        assert line.split("  #")[0].strip() in TABLE["mps"]["setup"]
    if t.layout == "intra":
        pct = [int(v) for p in plan.processes for k, v in p.env
               if k == "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]
        assert pct == [35, 65] and plan.setup
    if t.layout == "cross":
        d = t.deployment
        servers = [p for p in plan.processes if "prefill" in p.name or "decode" in p.name]
        # vLLM: a server a side, its workers data-parallel engines; the others: one a worker
        workers = [int(_value(p, "--data-parallel-size", "1")) for p in servers] \
            if engine == "vllm" else [1] * len(servers)
        assert sum(workers) == (d.num_prefill + d.num_decode) * d.replicas


def _value(proc: Process, flag: str, default: str | None = None) -> str | None:
    argv = list(proc.argv)
    return argv[argv.index(flag) + 1] if flag in argv else default


@pytest.mark.parametrize("case", ["mono-chunked-2dev", "cross-2p3d-ib", "mono-tp2-x4",
                                  "cross-2p1d-tp1-2-x2"])
def test_dynamo_graph_is_a_documented_deployment(case):
    yaml = pytest.importorskip("yaml")
    t = TARGETS[case]
    graph = yaml.safe_load(render(build_plan(t, "dynamo", "Qwen/Qwen3-0.6B"))["dynamo_graph.yaml"])
    doc = TABLE["dynamo"]["graph"]
    assert (graph["apiVersion"], graph["kind"]) == (doc["apiVersion"], doc["kind"])
    services = graph["spec"]["services"]
    for svc in services.values():
        assert set(svc) <= set(doc["service_keys"]), svc
        assert svc["componentType"] in doc["componentType"]
        assert svc.get("subComponentType", "prefill") in doc["subComponentType"]
        args = svc["extraPodSpec"]["mainContainer"].get("args", [])
        flags = [a for a in args if a.startswith("--")]
        assert set(flags) <= set(TABLE["dynamo"]["programs"]["dynamo.vllm"]), flags
    workers = {s.get("subComponentType", "agg"): s["replicas"]
               for s in services.values() if s["componentType"] == "worker"}
    d = t.deployment
    if t.layout == "cross":
        assert workers == {"prefill": d.num_prefill * d.replicas, "decode": d.num_decode * d.replicas}
    else:
        assert workers == {"agg": d.replicas}
    gpus = {s.get("subComponentType", "agg"): s["resources"]["limits"]["gpu"]
            for s in services.values() if s["componentType"] == "worker"}
    assert gpus == ({"prefill": str(d.prefill_tp), "decode": str(d.decode_tp)}
                    if t.layout == "cross" else {"agg": str(d.tp)})


@pytest.mark.parametrize("case", sorted(TARGETS))
def test_gpuprobe_plan_flags_are_our_cli(case):
    from gpuprobe.cli.main import build_parser
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices
    plan = build_plan(TARGETS[case], "gpuprobe", "tiny")
    files = render(plan)
    serve = shlex.split(files["serve.sh"].split("\n")[1])
    commands = [list(p.argv) for p in plan.processes] + [serve]
    for argv in commands:
        known = {s for a in sub[argv[1]]._actions for s in a.option_strings}
        assert set(a for a in argv if a.startswith("--")) <= known, argv
    body = json.loads(files["switch_curl.sh"].split(" -d '")[1].rsplit("'", 1)[0])
    assert body["actor"] == "gpuprobe-apply"
    assert body["reason"] == f"recommendation {TARGETS[case].id}"
    assert body["layout"] == TARGETS[case].layout


def test_plans_carry_tp_and_dp_for_every_side():
    """cross 2P(TP1)1D(TP2) x2 on 8 GPUs and monolithic TP2 x4: each engine's own flags."""
    mono, cross = TARGETS["mono-tp2-x4"], TARGETS["cross-2p1d-tp1-2-x2"]
    v = build_plan(mono, "vllm", "m").processes[0]
    assert (_value(v, "--tensor-parallel-size"), _value(v, "--data-parallel-size")) == ("2", "4")
    s = build_plan(mono, "sglang", "m").processes[0]
    assert (_value(s, "--tp-size"), _value(s, "--dp-size")) == ("2", "4")
    dyn = [p for p in build_plan(mono, "dynamo", "m").processes if p.program == "dynamo.vllm"]
    assert [dict(p.env)["CUDA_VISIBLE_DEVICES"] for p in dyn] == ["0,1", "2,3", "4,5", "6,7"]
    assert {_value(p, "--tensor-parallel-size") for p in dyn} == {"2"}
    # vLLM: one server a side, prefill DP4 x TP1 on GPUs 0,1,4,5; decode DP2 x TP2 on 2,3,6,7
    side = {p.name.split()[0]: p for p in build_plan(cross, "vllm", "m").processes
            if p.program == "vllm serve"}
    assert dict(side["prefill"].env)["CUDA_VISIBLE_DEVICES"] == "0,1,4,5"
    assert (_value(side["prefill"], "--tensor-parallel-size"),
            _value(side["prefill"], "--data-parallel-size")) == (None, "4")
    assert dict(side["decode"].env)["CUDA_VISIBLE_DEVICES"] == "2,3,6,7"
    assert (_value(side["decode"], "--tensor-parallel-size"),
            _value(side["decode"], "--data-parallel-size")) == ("2", "2")
    # SGLang: a server per worker from its first GPU, TP where a worker spans two
    sg = [p for p in build_plan(cross, "sglang", "m").processes
          if p.program == "sglang.launch_server"]
    assert [(p.name.split()[0], _value(p, "--base-gpu-id"), _value(p, "--tp-size")) for p in sg] == \
        [("prefill", "0", None), ("prefill", "1", None), ("prefill", "4", None),
         ("prefill", "5", None), ("decode", "2", "2"), ("decode", "6", "2")]
