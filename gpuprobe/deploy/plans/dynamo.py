"""NVIDIA Dynamo with the vLLM backend: a frontend plus aggregated, or prefill and decode,
workers; locally as commands, on Kubernetes as a DynamoGraphDeployment with worker counts."""
from __future__ import annotations

from gpuprobe.deploy.plans import split
from gpuprobe.deploy.plans.plan import Plan, Process
from gpuprobe.deploy.plans.vllm import kv_config
from gpuprobe.decide.recommendation import Deployment, Recommendation

VERSION = "v1.6.2"
SOURCES = (
    "https://docs.nvidia.com/dynamo/v1.6.2/kubernetes/disaggregated-serving/overview "
    "(DynamoGraphDeployment: Frontend, VllmPrefillWorker, VllmDecodeWorker, componentType, "
    "subComponentType, replicas)",
    "https://docs.nvidia.com/dynamo/v1.6.2/reference/backends/v-llm-configuration "
    "(python -m dynamo.vllm --disaggregation-mode prefill|decode; every vLLM engine argument)",
    "https://github.com/ai-dynamo/dynamo/blob/main/examples/backends/vllm/launch/disagg.sh "
    "(python -m dynamo.frontend, --kv-transfer-config NixlConnector, DYN_SYSTEM_PORT)",
    "vLLM v0.32.0 vllm/distributed/kv_transfer/kv_connector/v1/nixl/connector.py (kv_role "
    "kv_both with NixlConnector is deprecated: kv_producer for prefill, kv_consumer for decode)",
)
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.2"
# Dynamo's examples used kv_both on both sides; vLLM 0.32 deprecates that for NixlConnector.
KV_ROLE = {"prefill": kv_config("kv_producer"), "decode": kv_config("kv_consumer")}


def _engine_args(d: Deployment) -> list[str]:
    """vLLM engine arguments an aggregated worker takes (Dynamo passes them through)."""
    args = ["--enable-chunked-prefill" if d.chunked_prefill_tokens else "--no-enable-chunked-prefill"]
    if d.chunked_prefill_tokens:
        args += ["--max-num-batched-tokens", str(d.chunked_prefill_tokens)]
    if d.max_num_seqs:
        args += ["--max-num-seqs", str(d.max_num_seqs)]
    return args


def build(rec: Recommendation, model: str, total_sms: int) -> Plan:
    d = rec.deployment
    front = Process("frontend: clients send requests to port 8000", "dynamo.frontend",
                    ("python", "-m", "dynamo.frontend", "--http-port", "8000"))
    notes = ["Dynamo's local launch needs etcd and NATS: `docker compose -f "
             "dev/docker-compose.yml up -d` in a Dynamo checkout."] + list(split.link_notes(d))
    setup, sources, files = (), SOURCES, {}
    workers: list[Process] = []
    if d.layout == "monolithic":
        args = _engine_args(d) + _tp(d.tp)
        for i, ids in enumerate(split.groups(d)["mixed"]):
            workers.append(_worker(f"worker {i} (GPU {split.visible(ids)})", model, ids,
                                   8081 + i, args))
        files["dynamo_graph.yaml"] = graph(rec, model, {"VllmWorker": (None, d.replicas, d.tp,
                                                                      args)})
        summary = (f"Dynamo, aggregated: {d.replicas} vLLM worker(s) of TP{d.tp} doing prefill "
                   f"and decode, behind the frontend.")
    else:
        if d.layout == "intra":
            setup, sources = split.MPS_SETUP, SOURCES + (split.MPS_DOC,)
            notes += [split.intra_note(d, total_sms),
                      "A DynamoGraphDeployment gives each worker whole GPUs, so an intra split "
                      "is launched locally only (no dynamo_graph.yaml)."]
        else:
            files["dynamo_graph.yaml"] = graph(rec, model, {
                "VllmPrefillWorker": ("prefill", d.num_prefill * d.replicas, d.prefill_tp,
                                      _role_args("prefill", d.prefill_tp)),
                "VllmDecodeWorker": ("decode", d.num_decode * d.replicas, d.decode_tp,
                                     _role_args("decode", d.decode_tp))})
        k = 0
        for role, groups, pct in split.sides(d):
            for i, ids in enumerate(groups):
                extra = (("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", str(pct)),) if pct else ()
                workers.append(_worker(f"{role} worker {i} (GPU {split.visible(ids)})", model,
                                       ids, 8081 + k, _role_args(role, len(ids)),
                                       extra + (("VLLM_NIXL_SIDE_CHANNEL_PORT", str(20097 + k)),)))
                k += 1
        sizes = {role: (len(g), len(g[0])) for role, g, _ in split.sides(d)}
        summary = (f"Dynamo, disaggregated ({d.layout}): {sizes['prefill'][0]} prefill worker(s) "
                   f"of TP{sizes['prefill'][1]} and {sizes['decode'][0]} decode worker(s) of "
                   f"TP{sizes['decode'][1]}, the KV cache over NIXL, behind the frontend.")
    notes += list(split.host_note(d))
    procs = (front, *workers[:-1], Process(workers[-1].name, workers[-1].program,
                                            workers[-1].argv, workers[-1].env, background=False))
    return Plan("dynamo", rec, VERSION, sources, summary, procs, setup, tuple(notes), files)


def _tp(tp: int) -> list[str]:
    return ["--tensor-parallel-size", str(tp)] if tp > 1 else []


def _role_args(role: str, tp: int) -> list[str]:
    return ["--disaggregation-mode", role, "--kv-transfer-config", KV_ROLE[role]] + _tp(tp)


def _worker(name: str, model: str, ids: list[int], system_port: int, args: list[str],
            env: tuple = ()) -> Process:
    return Process(name, "dynamo.vllm", ("python", "-m", "dynamo.vllm", "--model", model, *args),
                   (("CUDA_VISIBLE_DEVICES", split.visible(ids)),
                    ("DYN_SYSTEM_PORT", str(system_port))) + tuple(env))


def graph(rec: Recommendation, model: str, workers: dict) -> str:
    """A DynamoGraphDeployment: the frontend and one service per worker kind with its
    replica count and GPUs per worker (its TP). workers: {service: (subComponentType | None,
    replicas, gpus, args)}."""
    lines = ["# gpuprobe plan: recommendation %d on Dynamo %s (nothing has been applied)"
             % (rec.id, VERSION),
             "apiVersion: nvidia.com/v1alpha1", "kind: DynamoGraphDeployment", "metadata:",
             f"  name: gpuprobe-rec-{rec.id}", "spec:", "  services:",
             "    Frontend:", "      componentType: frontend", "      replicas: 1",
             "      extraPodSpec:", "        mainContainer:", f"          image: {IMAGE}"]
    for name, (sub, replicas, gpus, args) in workers.items():
        lines += [f"    {name}:", "      componentType: worker"]
        if sub:
            lines.append(f"      subComponentType: {sub}")
        lines += [f"      replicas: {replicas}", "      resources:", "        limits:",
                  f'          gpu: "{gpus}"', "      extraPodSpec:", "        mainContainer:",
                  f"          image: {IMAGE}", "          command:", "          - python3",
                  "          - -m", "          - dynamo.vllm", "          args:",
                  "            - --model", f"            - {_yaml_str(model)}"]
        lines += [f"            - {_yaml_str(a)}" for a in args]
    return "\n".join(lines) + "\n"


def _yaml_str(s: str) -> str:
    """A YAML scalar: single-quoted when it could be read as something else (JSON, numbers)."""
    plain = s and not any(c in s for c in "{}[]:,#'\"&*!|>%@`") and not s[0].isdigit() \
        and s.lower() not in ("true", "false", "null", "yes", "no", "on", "off")
    return s if plain else "'" + s.replace("'", "''") + "'"
