"""`gpuprobe profile`: a cost-model profile from a live server, stored step records, or a spec sheet."""
from __future__ import annotations

import json
import sys

NAME = "profile"
HELP = "measure or derive the cost model (prefill/decode step curves, overheads) into a JSON profile"


def add_arguments(p) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--target", metavar="URL", help="live OpenAI-compatible server to calibrate")
    src.add_argument("--from-store", action="store_true", help="fit from the store's step records")
    src.add_argument("--spec", metavar="GPU", help="roofline from a datasheet: h200, h100, a100, l40s")
    p.add_argument("--run", metavar="RUN_ID", help="--from-store: only this server run")
    p.add_argument("--layout", default="monolithic", choices=["monolithic", "intra", "cross"],
                   help="--target: the layout the server runs (names the fitted workers)")
    p.add_argument("--max-prompt", type=int, default=1024, metavar="N",
                   help="--target: sweep prefills up to N tokens (default 1024); give the longest "
                        "prompt your workload sends, so the fit is not extrapolated")
    p.add_argument("--vocab", type=int, default=None, help="--target: token ids below this (default: ask the server)")
    p.add_argument("--model-shape", default="llama3-8b", help="--spec: model shape (default llama3-8b)")
    p.add_argument("--prefill-gpu", default=None, help="--spec: GPU for cross-layout prefill")
    p.add_argument("--decode-gpu", default=None, help="--spec: GPU for cross-layout decode")
    p.add_argument("--out", default="profile.json", help="where to write the profile (default profile.json)")
    p.add_argument("--name", default=None, help="also save it in the store under this name")


def _build(args):
    from gpuprobe.perf import profile as prof

    if args.spec:
        from gpuprobe.perf.roofline import roofline_profile

        return roofline_profile(args.model_shape, args.spec, args.prefill_gpu, args.decode_gpu)
    if args.from_store:
        from gpuprobe.store import Store

        with Store.open(args.store) as store:
            return prof.from_store(store, args.run)
    from gpuprobe.errors import UserError
    from gpuprobe.perf.calibrate import prefill_sizes_for, run_calibration

    if args.max_prompt < 16:
        raise UserError(f"--max-prompt must be >= 16, got {args.max_prompt}")
    cal = run_calibration(args.target, vocab=args.vocab,
                          prefill_sizes=prefill_sizes_for(args.max_prompt, args.max_prompt),
                          progress=lambda m: print(f"[profile] {m}", file=sys.stderr, flush=True))
    return prof.from_client(cal, args.layout)


def run(args) -> int:
    from gpuprobe.perf.profile import write_atomic

    profile = _build(args)
    write_atomic(args.out, profile.dumps())
    if args.name:
        from gpuprobe.store import Store

        with Store.open(args.store) as store:
            store.save_profile(args.name, profile.to_dict(), target=args.target)
    conf = profile.confidence(tuple({"monolithic" if k == "monolithic" else k.split(".")[0]
                                     for k in profile.workers}))
    print(json.dumps({"out": args.out, "workers": sorted(profile.workers),
                      "confidence": conf["level"], "reasons": conf["reasons"]}))
    return 0
