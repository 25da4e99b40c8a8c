"""SGLang: one server with a chunked-prefill size, or prefill and decode servers
(`--disaggregation-mode`) with a transfer backend and bootstrap ports, behind the router."""
from __future__ import annotations

from gpuprobe.deploy.plans import split
from gpuprobe.deploy.plans.plan import Plan, Process
from gpuprobe.decide.recommendation import Deployment, Recommendation

VERSION = "v0.5.3"
SOURCES = (
    "https://docs.sglang.io/advanced_features/server_arguments.html (--chunked-prefill-size, "
    "--max-running-requests, --dp-size, --base-gpu-id, --mem-fraction-static, "
    "--disaggregation-mode, --disaggregation-transfer-backend, --disaggregation-bootstrap-port)",
    "https://docs.sglang.io/advanced_features/pd_disaggregation.html (Mooncake and NIXL "
    "backends, python -m sglang_router.launch_router --pd-disaggregation)",
    "https://docs.sglang.io/advanced_features/router.html (--prefill URL BOOTSTRAP_PORT, "
    "--decode URL)",
)
BOOTSTRAP_PORT = 8998  # SGLang's default --disaggregation-bootstrap-port


def backend(d: Deployment) -> str:
    """Mooncake over RDMA (ib, roce); NIXL otherwise (UCX picks NVLink, shared memory or TCP)."""
    return "mooncake" if d.link in ("ib", "roce") else "nixl"


def build(rec: Recommendation, model: str, total_sms: int) -> Plan:
    if rec.layout == "monolithic":
        return _monolithic(rec, model)
    return _split(rec, model, total_sms)


def _monolithic(rec: Recommendation, model: str) -> Plan:
    d = rec.deployment
    chunk = str(d.chunked_prefill_tokens) if d.chunked_prefill_tokens \
        else "-1"  # -1 turns chunked prefill off
    argv = ["python", "-m", "sglang.launch_server", "--model-path", model, "--port", "30000",
            "--chunked-prefill-size", chunk]
    if d.max_num_seqs:
        argv += ["--max-running-requests", str(d.max_num_seqs)]
    if d.tp > 1:
        argv += ["--tp-size", str(d.tp)]
    if d.replicas > 1:
        argv += ["--dp-size", str(d.replicas)]
    what = (f"prompts in chunks of {chunk} tokens" if chunk != "-1" else
            "whole prompts (chunked prefill off)")
    return Plan("sglang", rec, VERSION, SOURCES,
                f"One SGLang server on {d.devices} GPU(s) ({d.replicas} data-parallel "
                f"worker(s) of TP{d.tp}), prefilling {what}.",
                (Process("sglang server", "sglang.launch_server", tuple(argv),
                         background=False),), notes=split.host_note(d))


def _split(rec: Recommendation, model: str, total_sms: int) -> Plan:
    d = rec.deployment
    notes, sources = list(split.link_notes(d)), SOURCES
    mem, setup, intra_notes = split.intra_memory(d, total_sms, "--mem-fraction-static",
                                                 "0.3", "0.5")
    notes += intra_notes
    if d.layout == "intra":
        sources = SOURCES + (split.MPS_DOC,)
    procs, urls = [], {"prefill": [], "decode": []}
    be = backend(d)
    for role, groups, pct in split.sides(d):
        # a server per worker (its TP group from --base-gpu-id on); the router spreads the
        # requests over each side's servers: that side's data parallelism
        for i, ids in enumerate(groups):
            port = (30000 if role == "prefill" else 30100) + i
            argv = ["python", "-m", "sglang.launch_server", "--model-path", model,
                    "--port", str(port), "--base-gpu-id", str(ids[0]),
                    "--disaggregation-mode", role, "--disaggregation-transfer-backend", be]
            if len(ids) > 1:
                argv += ["--tp-size", str(len(ids))]
            if role == "prefill":
                argv += ["--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT + i)]
            if mem[role]:
                argv += ["--mem-fraction-static", mem[role]]
            env = (("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", str(pct)),) if pct is not None else ()
            procs.append(Process(f"{role} server {i} (GPU {split.visible(ids)})",
                                 "sglang.launch_server", tuple(argv), env))
            urls[role].append((f"http://127.0.0.1:{port}", BOOTSTRAP_PORT + i))
    router = ["python", "-m", "sglang_router.launch_router", "--pd-disaggregation"]
    for url, boot in urls["prefill"]:
        router += ["--prefill", url, str(boot)]
    for url, _ in urls["decode"]:
        router += ["--decode", url]
    router += ["--host", "0.0.0.0", "--port", "8000"]
    procs.append(Process("router: clients send requests to port 8000",
                         "sglang_router.launch_router", tuple(router), background=False))
    if be == "mooncake":
        notes.append("Mooncake needs `pip install mooncake-transfer-engine`; it finds the "
                     "RDMA devices itself, or name them with --disaggregation-ib-device.")
    else:
        notes.append("NIXL needs `pip install nixl`.")
    notes += split.host_note(d)
    where = split.where(d, "server")
    return Plan("sglang", rec, VERSION, sources,
                f"Disaggregated SGLang ({d.layout}): prefill and decode servers {where}, KV "
                f"over {be}, the router in front.", tuple(procs), setup, tuple(notes))
