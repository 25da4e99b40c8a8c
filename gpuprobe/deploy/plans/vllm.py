"""vLLM: one `vllm serve` (chunked prefill, token budget), or prefill and decode instances
joined by NixlConnector (`--kv-transfer-config`) behind vLLM's NIXL proxy."""
from __future__ import annotations

import json

from gpuprobe.deploy.plans import split
from gpuprobe.deploy.plans.plan import Plan, Process
from gpuprobe.decide.recommendation import Recommendation

VERSION = "v0.32.0"  # every `vllm serve` line is parsed by this version's own parser in the tests
SOURCES = (
    "https://docs.vllm.ai/en/v0.32.0/configuration/engine_args/ (--enable-chunked-prefill, "
    "--max-num-batched-tokens, --max-num-seqs, --data-parallel-size, --kv-transfer-config, "
    "--gpu-memory-utilization)",
    "https://docs.vllm.ai/en/v0.32.0/features/nixl_connector_usage/ (NixlConnector, kv_role "
    "kv_producer/kv_consumer, VLLM_NIXL_SIDE_CHANNEL_PORT/HOST, UCX_NET_DEVICES, "
    "toy_proxy_server.py)",
    "https://docs.vllm.ai/en/v0.32.0/serving/data_parallel_deployment/ (--data-parallel-size)",
    "https://docs.vllm.ai/en/v0.32.0/features/nixl_connector_compatibility/ (NixlConnector: "
    "data parallel, a different TP on prefill and decode)",
)
PROXY = "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"  # in the vLLM repository


def kv_config(role: str) -> str:
    return json.dumps({"kv_connector": "NixlConnector", "kv_role": role}, separators=(",", ":"))


def build(rec: Recommendation, model: str, total_sms: int) -> Plan:
    return _monolithic(rec, model) if rec.layout == "monolithic" else _split(rec, model, total_sms)


def _monolithic(rec: Recommendation, model: str) -> Plan:
    d = rec.deployment
    argv = ["vllm", "serve", model, "--port", "8000"]
    if d.chunked_prefill_tokens:
        argv += ["--enable-chunked-prefill", "--max-num-batched-tokens", str(d.chunked_prefill_tokens)]
    else:
        argv += ["--no-enable-chunked-prefill"]
    if d.max_num_seqs:
        argv += ["--max-num-seqs", str(d.max_num_seqs)]
    argv += parallel(d.tp, d.replicas)
    budget = (f"chunks of at most {d.chunked_prefill_tokens} tokens per step"
              if d.chunked_prefill_tokens else "whole prompts per step (chunked prefill off)")
    return Plan("vllm", rec, VERSION, SOURCES,
                f"One vLLM server on {d.devices} GPU(s) ({d.replicas} data-parallel engine(s) "
                f"of TP{d.tp}): prefill and decode share each step, {budget}.",
                (Process("vllm server", "vllm serve", tuple(argv), background=False),),
                notes=split.host_note(d))


def parallel(tp: int, dp: int) -> list[str]:
    """An engine's tensor- and data-parallel flags (none at 1: vLLM's defaults)."""
    out = ["--tensor-parallel-size", str(tp)] if tp > 1 else []
    return out + (["--data-parallel-size", str(dp)] if dp > 1 else [])


def _split(rec: Recommendation, model: str, total_sms: int) -> Plan:
    d = rec.deployment
    procs, notes, sources = [], list(split.link_notes(d)), SOURCES
    mem, setup, intra_notes = split.intra_memory(d, total_sms, "--gpu-memory-utilization",
                                                 "0.3", "0.6")
    notes += intra_notes
    if d.layout == "intra":
        sources = SOURCES + (split.MPS_DOC,)
    hosts = {"prefill": [], "decode": []}
    for k, (role, groups, pct) in enumerate(split.sides(d)):
        # one server a side: its workers are the data-parallel engines of one `vllm serve`
        # (NixlConnector takes DP and a TP per side), which balances requests among them
        port = 8100 if role == "prefill" else 8200
        ids = [i for g in groups for i in g]
        env = [("CUDA_VISIBLE_DEVICES", split.visible(sorted(set(ids)))),
               ("UCX_NET_DEVICES", "all"), ("VLLM_NIXL_SIDE_CHANNEL_PORT", str(5600 + 100 * k))]
        if d.link == "tcp":
            env.append(("UCX_TLS", "tcp"))
        if pct is not None:
            env.append(("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", str(pct)))
        argv = ["vllm", "serve", model, "--port", str(port), "--kv-transfer-config",
                kv_config("kv_producer" if role == "prefill" else "kv_consumer")]
        argv += parallel(len(groups[0]), len(groups))
        if mem[role]:
            argv += ["--gpu-memory-utilization", mem[role]]
        procs.append(Process(f"{role} server: {len(groups)} worker(s) of TP{len(groups[0])} "
                             f"(GPU {split.visible(ids)})", "vllm serve", tuple(argv), tuple(env)))
        hosts[role].append(port)
    n_p, n_d = len(hosts["prefill"]), len(hosts["decode"])
    proxy = ["python", PROXY, "--port", "8192",
             "--prefiller-hosts", *["localhost"] * n_p,
             "--prefiller-ports", *map(str, hosts["prefill"]),
             "--decoder-hosts", *["localhost"] * n_d,
             "--decoder-ports", *map(str, hosts["decode"])]
    procs.append(Process("proxy: clients send requests to port 8192", "toy_proxy_server.py",
                         tuple(proxy), background=False))
    notes.append(f"The proxy is vLLM's example ({PROXY}, run from a vLLM checkout); any router "
                 f"that sends the prefill request first and passes kv_transfer_params on works.")
    notes += split.host_note(d)
    where = split.where(d, "worker")
    return Plan("vllm", rec, VERSION, sources,
                f"Disaggregated vLLM ({d.layout}): prefill and decode instances {where}, the KV "
                f"cache handed over by NixlConnector.", tuple(procs), setup, tuple(notes))
