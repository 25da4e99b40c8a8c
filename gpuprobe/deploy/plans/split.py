"""How a split maps onto devices, shared by every engine's plan.

intra: both workers on one GPU, run side by side under an MPS daemon, each capped to its
share of the SMs with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (NVIDIA MPS documentation,
"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"); the same split as green-context SM counts is what the
reference server uses (gpuprobe/server/green_partition.py). cross: x prefill and y decode
workers, each a tensor-parallel group of consecutive devices; `replicas` copies of the unit
take the next devices (groups()).
"""
from __future__ import annotations

from gpuprobe.decide.recommendation import Deployment
from gpuprobe.server.green_partition import prefill_sm_count

MPS_DOC = ("https://docs.nvidia.com/deploy/mps/ (Multi-Process Service: nvidia-cuda-mps-control, "
           "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)")
MPS_SETUP = ("nvidia-cuda-mps-control -d  # MPS daemon: without it the two processes "
             "time-slice the GPU instead of sharing its SMs",)
MULTI_HOST_LINKS = ("ib", "roce", "tcp")


def mps_percent(share: float) -> tuple[int, int]:
    """(prefill %, decode %) of the GPU's threads; each side keeps at least 1%."""
    p = min(99, max(1, round(share * 100)))
    return p, 100 - p


def sm_counts(share: float, total_sms: int) -> tuple[int, int]:
    """(prefill SMs, decode SMs) as green contexts split them (groups of 8 on Hopper)."""
    p = prefill_sm_count(total_sms, share)
    return p, total_sms - p


def intra_note(d: Deployment, total_sms: int) -> str:
    p_sms, d_sms = sm_counts(d.prefill_share, total_sms)
    pp, dp = mps_percent(d.prefill_share)
    return (f"intra split {d.prefill_share:.2f}: prefill {pp}% / decode {dp}% of the GPU's "
            f"threads (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); as green-context SM counts on a "
            f"{total_sms}-SM GPU: prefill {p_sms} SMs, decode {d_sms} SMs (what `gpuprobe serve "
            f"--device cuda --layout intra` uses)")


def groups(d: Deployment) -> dict[str, list[list[int]]]:
    """Device ids of every worker over all replicas, each a TP group of consecutive ids, one
    unit after the other: {'mixed': ...} for monolithic, {'prefill': ..., 'decode': ...} for
    intra (both engines on each group) and cross (a unit's prefill workers, then its decode
    workers)."""
    out: dict[str, list[list[int]]] = {}
    nxt = 0

    def take(role: str, n: int) -> list[int]:
        nonlocal nxt
        out.setdefault(role, []).append(list(range(nxt, nxt + n)))
        nxt += n
        return out[role][-1]

    for _ in range(d.replicas):
        if d.layout == "monolithic":
            take("mixed", d.tp)
        elif d.layout == "intra":
            out.setdefault("decode", []).append(take("prefill", d.tp))
        else:
            for _ in range(d.num_prefill):
                take("prefill", d.prefill_tp)
            for _ in range(d.num_decode):
                take("decode", d.decode_tp)
    return out


def visible(ids) -> str:
    """CUDA_VISIBLE_DEVICES for these device ids."""
    return ",".join(str(i) for i in ids)


def host_note(d: Deployment) -> tuple[str, ...]:
    """Past one 8-GPU host the ids run on: GPU k is GPU k mod 8 of host k div 8."""
    if d.devices <= 8:
        return ()
    return (f"{d.devices} GPUs: more than one host. GPU k in these commands is GPU k mod 8 on "
            f"host k div 8 (hosts of 8 GPUs); start each process on its host with the ids "
            f"taken mod 8.",)


def where(d: Deployment, unit: str) -> str:
    """Where a split plan's processes run, in words: the GPUs MPS splits, or how many prefill
    and decode `unit`s (server, worker) of which TP."""
    if d.layout == "intra":
        return f"on {d.devices} GPU(s), each split by MPS"
    return (f"as {d.num_prefill * d.replicas} prefill {unit}(s) of TP{d.prefill_tp} and "
            f"{d.num_decode * d.replicas} decode {unit}(s) of TP{d.decode_tp}")


def link_notes(d: Deployment) -> tuple[str, ...]:
    if d.layout != "cross":
        return ()
    link = d.link or "nvlink"
    if link in MULTI_HOST_LINKS:
        return (f"link {link}: prefill and decode run on different hosts. Start each process on "
                f"its own host, replace 127.0.0.1 with that host's address, and number the "
                f"GPUs from 0 on each host.",)
    if link == "nvlink":
        return ("link nvlink: all devices on one host, so the KV cache moves over NVLink.",)
    return (f"link {link} Gbit/s (as profiled): check that the transfer backend uses that path.",)


def sides(d: Deployment) -> list[tuple[str, list[list[int]], int | None]]:
    """[(role, device ids of each of its workers, MPS thread % or None)] for the prefill and
    the decode side: intra puts both on each group under MPS, cross gives each side its own
    devices (groups())."""
    g = groups(d)
    if d.layout == "intra":
        pp, dp = mps_percent(d.prefill_share)
        return [("prefill", g["prefill"], pp), ("decode", g["decode"], dp)]
    return [("prefill", g["prefill"], None), ("decode", g["decode"], None)]


def intra_memory(d: Deployment, total_sms: int, flag: str, prefill: str,
                 decode: str) -> tuple[dict, tuple[str, ...], tuple[str, ...]]:
    """For two engine instances sharing each GPU (group): ({role: memory fraction or None},
    setup lines, notes). Prefill holds a prompt's KV only until decode has read it, so it
    gets less."""
    if d.layout != "intra":
        return {"prefill": None, "decode": None}, (), ()
    where = "GPU 0" if d.devices == 1 else "each GPU"
    return ({"prefill": prefill, "decode": decode}, MPS_SETUP,
            (intra_note(d, total_sms),
             f"Both instances share {where}, so each gets part of its memory ({flag} {prefill} "
             f"prefill, {decode} decode); tune to the KV your batch needs."))
