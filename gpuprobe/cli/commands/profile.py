"""`gpuprobe profile`: a cost-model profile from a live server, stored step records, or a spec sheet."""
from __future__ import annotations

import json
import sys

from gpuprobe.argtypes import http_url, positive_int, share_of_whole

NAME = "profile"
HELP = "measure or derive the cost model (prefill/decode step curves, overheads) into a JSON profile"
MAX_PROMPT = 1024
MAX_BATCH = 64  # the calibration's largest decode burst by default (calibrate.DECODE_BATCHES)
# The flags that apply to one source only; given with another, they are refused.
MODE_FLAGS = {"target": ("layout", "max_prompt", "max_batch", "vocab", "kv_bytes_per_token",
                        "max_model_len", "model_config"), "from_store": ("run",),
              "spec": ("model_shape", "prefill_gpu", "decode_gpu", "engine", "engine_version",
                       "tp", "prefill_tp", "decode_tp", "gpu_memory_utilization")}
ENGINES = ("vllm", "sglang", "trtllm")


def add_arguments(p) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--target", type=http_url, metavar="URL",
                     help="live OpenAI-compatible server to calibrate, e.g. http://127.0.0.1:8000")
    src.add_argument("--from-store", action="store_true", help="fit from the store's step records")
    src.add_argument("--spec", metavar="GPU",
                     help="a GPU's step costs without a server: h200, h100, a100, l40s, b200, or "
                          "an AIConfigurator system (h200_sxm, gb200, ...); from measured "
                          "silicon data where `gpuprobe[silicon]` has the GPU and --engine, else "
                          "the datasheet roofline (the output says which)")
    p.add_argument("--run", metavar="RUN_ID", help="--from-store: only this server run")
    p.add_argument("--layout", choices=["monolithic", "intra", "cross"],
                   help="--target: the layout the server runs (names the fitted workers; "
                        "default monolithic)")
    p.add_argument("--max-prompt", type=positive_int, metavar="N",
                   help=f"--target: sweep prefills up to N tokens (default {MAX_PROMPT}; at most "
                        f"the server's context less one); give the longest prompt your workload "
                        f"sends, so the fit is not extrapolated")
    p.add_argument("--max-batch", type=positive_int, metavar="N",
                   help=f"--target: decode bursts of up to N concurrent streams (default "
                        f"{MAX_BATCH}); a smaller N profiles a slow server (a CPU) in less "
                        f"time, and predictions of batches past 1.5 N are flagged as "
                        f"extrapolated")
    p.add_argument("--vocab", type=positive_int, metavar="N",
                   help="--target: token ids below this (default: ask the server)")
    p.add_argument("--kv-bytes-per-token", type=positive_int, metavar="N",
                   help="--target: KV cache bytes per token (2 x layers x KV heads x head dim x "
                        "dtype bytes), where neither the server nor the model's config.json says")
    p.add_argument("--max-model-len", type=positive_int, metavar="N",
                   help="--target: the served context length, where /v1/models does not say")
    p.add_argument("--model-config", metavar="PATH",
                   help="--target: the model's config.json (or its folder), where the server's "
                        "/v1/models root is not a path on this host")
    p.add_argument("--model-shape", help="--spec: model shape: llama3-8b (Llama-3.1-8B, the "
                                         "default) or llama3-70b")
    p.add_argument("--engine", choices=(*ENGINES, "roofline"), default=None,
                   help="--spec: the engine whose measured kernel timings to use (default vllm); "
                        "roofline: the datasheet model even where data exists")
    p.add_argument("--engine-version", metavar="V",
                   help="--spec: that engine's data version (default the newest the data has)")
    for flag, what in (("--tp", "tensor-parallel devices per worker (default 1): the step adds "
                                "two all-reduces per layer, weights and KV cache split N ways"),
                       ("--prefill-tp", "TP of cross's prefill workers (default --tp)"),
                       ("--decode-tp", "TP of cross's decode workers (default --tp)")):
        p.add_argument(flag, type=positive_int, metavar="N", help=f"--spec: {what}")
    p.add_argument("--gpu-memory-utilization", type=share_of_whole, metavar="F",
                   help="--spec: share of each device's memory the engine may take, as vLLM's "
                        "flag (default 0.9); the KV cache gets what weights and activations "
                        "leave of it, and a model that does not fit is refused")
    p.add_argument("--prefill-gpu", default=None, help="--spec: GPU for cross-layout prefill")
    p.add_argument("--decode-gpu", default=None, help="--spec: GPU for cross-layout decode")
    p.add_argument("--out", default="profile.json", help="where to write the profile (default profile.json)")
    p.add_argument("--name", default=None, help="also save it in the store under this name")


def _check_mode(args) -> None:
    from gpuprobe.errors import UserError

    mode = next(m for m in MODE_FLAGS if getattr(args, m))
    for other, names in MODE_FLAGS.items():
        given = [n for n in names if other != mode and getattr(args, n) is not None]
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise UserError(f"{flag} applies to --{other.replace('_', '-')} only, "
                            f"not to --{mode.replace('_', '-')}")


def _build(args):
    from gpuprobe.perf import profile as prof

    if args.spec:
        return _spec(args)
    if args.from_store:
        from gpuprobe.store import Store

        with Store.open(args.store) as store:
            return prof.from_store(store, args.run)
    from gpuprobe.errors import UserError
    from gpuprobe.workloads.calibrate import (DECODE_PROMPTS, decode_batches_for, prefill_sizes_for,
                                         run_calibration, server_model)
    from gpuprobe.workloads.mixed_sweep import MIXED_PROMPTS
    from gpuprobe.perf.served_model import describe

    def say(msg: str) -> None:
        print(f"[profile] {msg}", file=sys.stderr, flush=True)

    max_prompt = args.max_prompt or MAX_PROMPT
    if max_prompt < 16:
        raise UserError(f"--max-prompt must be >= 16, got {max_prompt}")
    if args.max_batch is not None and args.max_batch < 2:
        # the decode fit has three terms (step, per sequence, per context token): bursts of 1
        # and 2 streams at two prompt lengths are the fewest that determine them
        raise UserError(f"--max-batch must be >= 2 (the decode fit needs two batch sizes), "
                        f"got {args.max_batch}")
    entry = server_model(args.target)
    if not entry:
        from gpuprobe.errors import GpuprobeError
        raise GpuprobeError(f"cannot profile {args.target}: GET /v1/models names no model "
                            f"(is the server up?)")
    served = describe(args.target, entry, args.kv_bytes_per_token, args.max_model_len,
                      args.model_config)
    context = served.max_model_len
    say(f"model {served.model}: context {context} tokens, KV {served.kv_bytes_per_token} bytes "
        f"per token (from {served.kv_source})")
    limit = context - 1  # room for one output token
    if max_prompt > limit:
        say(f"--max-prompt {max_prompt} is more than the server's context of {context} tokens "
            f"allows; sweeping prefills up to {limit} (one token is left for the output)")
    sizes = prefill_sizes_for(max_prompt, min(max_prompt, limit))
    batches = decode_batches_for(args.max_batch or MAX_BATCH)
    layout = args.layout or "monolithic"
    mixed = tuple(n for n in MIXED_PROMPTS if n <= sizes[-1]) or (sizes[-1],)
    mixed = mixed if layout == "monolithic" else ()  # split workers never share a step
    say(f"plan: prefill sweep of {len(sizes)} sizes up to {sizes[-1]} tokens x 4, decode bursts of "
        f"{', '.join(map(str, batches))} streams at each of {', '.join(map(str, DECODE_PROMPTS))} "
        f"prompt tokens, idle probes" + (", mixed sweep" if mixed else ""))
    cal = run_calibration(args.target, vocab=args.vocab, prefill_sizes=sizes,
                          decode_batches=batches, progress=say, detail=say, keep_partial=True,
                          mixed_prompts=mixed)
    profile = prof.with_target(prof.from_client(cal, layout), cal, served)
    say(f"mixed-step slowdown {profile.meta['mixed_step']}: factor "
        f"{profile.workers[next(iter(profile.workers))].mixed_factor:.2f}")
    if cal["cut"]:  # kept in the profile: its decode fit stops short of --max-batch
        from dataclasses import replace
        profile = replace(profile, meta={**profile.meta, "decode_bursts_cut": cal["cut"]})
    return profile


def _spec(args):
    from gpuprobe.perf.memory import DEFAULT_GPU_MEMORY_UTILIZATION
    from gpuprobe.perf.silicon_profile import spec_profile

    engine = args.engine or "vllm"
    kw = dict(tp=args.tp or 1, prefill_gpu=args.prefill_gpu, decode_gpu=args.decode_gpu,
              prefill_tp=args.prefill_tp, decode_tp=args.decode_tp,
              gpu_memory_utilization=args.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION)
    if engine != "roofline":
        kw["version"] = args.engine_version
    return spec_profile(args.model_shape or "llama3-8b", args.spec,
                        None if engine == "roofline" else engine, **kw)


def _summary(args, profile, conf: dict) -> dict:
    """What the command prints: where the curves came from, and for a --spec profile each
    worker's TP and the KV tokens its memory holds."""
    out = {"out": args.out, "workers": sorted(profile.workers), "confidence": conf["level"],
           "reasons": conf["reasons"], "origins": conf["origins"]}
    meta = profile.meta or {}
    if args.spec:
        out["source"] = meta.get("source")
        if meta.get("silicon"):
            out["silicon"] = meta["silicon"]["monolithic"]
        if meta.get("fallback"):
            out["fallback"] = meta["fallback"]
        out["workers_tp"] = {k: w.tp for k, w in profile.workers.items()}
        out["max_kv_tokens"] = {k: w.max_kv_tokens for k, w in profile.workers.items()}
    return out


def run(args) -> int:
    from gpuprobe.perf.profile import write_atomic

    _check_mode(args)
    profile = _build(args)
    write_atomic(args.out, profile.dumps())
    if args.name:
        from gpuprobe.store import Store

        with Store.open(args.store) as store:
            store.save_profile(args.name, profile.to_dict(), target=args.target)
    conf = profile.confidence(tuple({"monolithic" if k == "monolithic" else k.split(".")[0]
                                     for k in profile.workers}))
    print(json.dumps(_summary(args, profile, conf)))
    return 0
