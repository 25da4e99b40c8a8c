"""`gpuprobe simulate`: predict a workload's latency per layout from a profile."""
from __future__ import annotations

import json

from gpuprobe.argtypes import nonneg_int, positive_float, positive_int
from gpuprobe.cli.flags import add_slo_flags

NAME = "simulate"
HELP = "simulate a workload through layouts with a cost-model profile (no server needed)"


def add_arguments(p) -> None:
    p.add_argument("--workload", required=True, metavar="NAME|FILE",
                   help="stored workload, trace file, or azure-conv / azure-code (bundled)")
    p.add_argument("--profile", required=True, metavar="FILE", help="profile JSON (gpuprobe profile)")
    p.add_argument("--layouts", default="monolithic,intra,cross",
                   help="comma-separated layouts to compare (default monolithic,intra,cross)")
    p.add_argument("--limit", type=positive_int, default=None, metavar="N",
                   help="first N requests only (default: all)")
    p.add_argument("--speed", type=positive_float, default=1.0,
                   help="arrival rate multiplier (default 1)")
    add_slo_flags(p)
    p.add_argument("--token-scale", type=positive_float, default=1.0, metavar="F",
                   help="scale prompt and output lengths (default 1)")
    p.add_argument("--max-num-seqs", type=positive_int, default=None, metavar="N",
                   help="sequences per batch per worker; a profile validate wrote brings its "
                        "servers' own (default 256)")
    p.add_argument("--num-blocks", type=positive_int, default=None, metavar="N",
                   help="KV blocks of 16 tokens per worker; a profile validate wrote brings its "
                        "servers' own, a --spec profile what its workers' memory holds "
                        "(else 40000)")
    p.add_argument("--seed", type=nonneg_int, default=0,
                   help="seed of the step-time noise a measured profile carries (default 0; "
                        "the same seed gives the same result)")
    p.add_argument("--seeds", type=positive_int, default=1, metavar="N",
                   help="predict with N noise seeds from --seed on and report their median "
                        "(default 1; validate uses 9)")
    p.add_argument("--json", action="store_true",
                   help="print the per-layout summaries and the pick as JSON")


def run(args) -> int:
    from gpuprobe.engine.scheduler import SchedulerConfig
    from gpuprobe.errors import UserError
    from gpuprobe.decide.candidates import Candidate, at_profile_tp
    from gpuprobe.decide.rank import rank
    from gpuprobe.decide.decision import WhatIf, scale_workload
    from gpuprobe.decide.search import search_candidates
    from gpuprobe.decide.slo import slo_from_flags
    from gpuprobe.perf.metrics import AGG_METRICS, best_note, pick_best
    from gpuprobe.perf.profile import load_profile
    from gpuprobe.sim.predict import predict
    from gpuprobe.sim.layouts import LAYOUTS
    from gpuprobe.workloads.loading import as_workload, load_named_workload

    layouts = [x.strip() for x in args.layouts.split(",") if x.strip()]
    if not layouts or any(x not in LAYOUTS for x in layouts):
        raise UserError(f"--layouts: choose from {', '.join(LAYOUTS)}")
    profile = load_profile(args.profile)
    wl = load_named_workload(args.store, args.workload)
    wl = scale_workload(as_workload(wl), WhatIf(rate_scale=args.speed, token_scale=args.token_scale,
                                                limit=args.limit))
    cfgs = {x: _config(profile, wl, args, SchedulerConfig, x) for x in layouts}
    slo = slo_from_flags(args.slo, args.slo_ttft, args.slo_tbt)
    # one prediction path (sim/predict.py); simulate has no host effects to apply
    out = {x: predict(wl, profile, x, slo, cfgs[x], args.seeds, args.seed) for x in layouts}
    cfg = cfgs[layouts[0]]
    limits = {"max_num_seqs": cfg.mixed.max_num_seqs}
    if args.num_blocks:  # else each candidate's workers hold what the profile says
        limits["num_blocks"] = args.num_blocks
    # The searched goodput (DistServe's) beside the offered-rate figures, and the pick by the
    # one ranking rule recommend uses (gpuprobe.decide.rank).
    cands = [at_profile_tp(Candidate(x, prefill_share=profile.prefill_share if x == "intra"
                                     else None), profile) for x in layouts]
    rows = search_candidates(wl, profile, cands, slo, seed=args.seed,
                             limits=limits)
    for x, r in zip(layouts, rows):
        out[x]["max_goodput_rps_per_device"] = r["max_goodput_rps_per_device"]
    ranked = rank(rows)
    best = ranked[0]["layout"] if ranked[0]["meets_slo"] else None
    notes = [_unserved(x, s, cfgs[x]) for x, s in out.items() if not s["num_completed"]]
    if best is None:  # no layout meets the SLO at any rate: the closest at the offered rate
        best = pick_best(out)
        if note := best_note(out, best):
            notes.append(note)
        if best is not None:
            notes.append("no layout meets these SLOs at any rate searched")
    if args.json:
        print(json.dumps({"layouts": out, "best": best, "slo": slo.to_dict(), "notes": notes,
                          "host_effects": [], "seeds": args.seeds}, default=float))
        return 0
    for x, s in out.items():
        vals = " ".join(f"{m}={s[m]:.4g}" for m in (*AGG_METRICS, "tpot_p99_s",
                                                     "offered_goodput_rps_per_device",
                                                     "max_goodput_rps_per_device"))
        print(f"{x:<11} {vals} slo={s['slo_attainment']:.3f} confidence={s['confidence']['level']}")
    print(f"best: {best or 'none'}")
    for note in notes:
        print(note)
    return 0


def _config(profile, wl, args, SchedulerConfig, layout: str):
    """The scheduler per role of `layout`: the profile's (validate records what its servers
    ran; a spec profile, the KV its workers' memory holds) where it has one and no flag
    overrides it, else the flags' defaults."""
    from gpuprobe.sim.layouts import LayoutConfig

    kept = (profile.meta or {}).get("scheduler") or {}
    out = []
    for role in ("mixed", "prefill", "decode"):
        kw = dict(kept.get(role) or {})
        blocks = kw.get("num_blocks") or profile.num_kv_blocks(layout, role) or 40000
        kw.update(role=role, max_num_seqs=args.max_num_seqs or kw.get("max_num_seqs", 256),
                  num_blocks=args.num_blocks or blocks)
        if not kept.get(role):
            kw["max_num_batched_tokens"] = max(2048, int(wl["prompt_tokens"].max()))
        out.append(SchedulerConfig(**kw))
    return LayoutConfig(*out)


def _unserved(layout: str, s: dict, cfg) -> str:
    rejected = s.get("num_rejected", 0)
    num_blocks = min(c.num_blocks for c in (cfg.mixed, cfg.prefill, cfg.decode))
    why = (f"{rejected} of {s['num_requests']} rejected, as they do not fit the KV cache "
           f"({num_blocks} blocks x 16 = {num_blocks * 16} tokens per worker)"
           if rejected else "none finished")
    return f"{layout}: no request completed: {why}"
