"""SGLang: one server with a chunked-prefill size, or prefill and decode servers
(`--disaggregation-mode`) with a transfer backend and bootstrap ports, behind the router."""
from __future__ import annotations

from gpuprobe.decide.plans import split
from gpuprobe.decide.plans.plan import Plan, Process
from gpuprobe.decide.rec_params import Target

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


def backend(t: Target) -> str:
    """Mooncake over RDMA (ib, roce); NIXL otherwise (UCX picks NVLink, shared memory or TCP)."""
    return "mooncake" if t.link in ("ib", "roce") else "nixl"


def build(t: Target, model: str, total_sms: int) -> Plan:
    if t.layout == "monolithic":
        return _monolithic(t, model)
    return _split(t, model, total_sms)


def _monolithic(t: Target, model: str) -> Plan:
    chunk = str(t.max_num_batched_tokens) if t.chunked_prefill and t.max_num_batched_tokens \
        else "-1"  # -1 turns chunked prefill off
    argv = ["python", "-m", "sglang.launch_server", "--model-path", model, "--port", "30000",
            "--chunked-prefill-size", chunk]
    if t.max_num_seqs:
        argv += ["--max-running-requests", str(t.max_num_seqs)]
    if t.devices > 1:
        argv += ["--dp-size", str(t.devices)]
    what = (f"prompts in chunks of {chunk} tokens" if chunk != "-1" else
            "whole prompts (chunked prefill off)")
    return Plan("sglang", t, VERSION, SOURCES,
                f"One SGLang server on {t.devices} GPU(s), prefilling {what}.",
                (Process("sglang server", "sglang.launch_server", tuple(argv),
                         background=False),))


def _split(t: Target, model: str, total_sms: int) -> Plan:
    notes, sources = list(split.link_notes(t)), SOURCES
    mem, setup, intra_notes = split.intra_memory(t, total_sms, "--mem-fraction-static",
                                                 "0.3", "0.5")
    notes += intra_notes
    if t.layout == "intra":
        sources = SOURCES + (split.MPS_DOC,)
    procs, urls = [], {"prefill": [], "decode": []}
    be = backend(t)
    for role, ids, pct in split.sides(t):
        for i, dev in enumerate(ids):
            port = (30000 if role == "prefill" else 30100) + i
            argv = ["python", "-m", "sglang.launch_server", "--model-path", model,
                    "--port", str(port), "--base-gpu-id", str(dev),
                    "--disaggregation-mode", role, "--disaggregation-transfer-backend", be]
            if role == "prefill":
                argv += ["--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT + i)]
            if mem[role]:
                argv += ["--mem-fraction-static", mem[role]]
            env = (("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", str(pct)),) if pct is not None else ()
            procs.append(Process(f"{role} server {i} (GPU {dev})", "sglang.launch_server",
                                 tuple(argv), env))
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
    where = ("on one GPU, split by MPS" if t.layout == "intra" else
             f"on {t.prefill_devices} prefill and {t.decode_devices} decode GPUs")
    return Plan("sglang", t, VERSION, sources,
                f"Disaggregated SGLang ({t.layout}): prefill and decode servers {where}, KV "
                f"over {be}, the router in front.", tuple(procs), setup, tuple(notes))
