"""`gpuprobe analyze`: the phase mix of a workload, bucket by bucket, and where it shifts."""
from __future__ import annotations

import json

from gpuprobe.cli.flags import add_source_flags

NAME = "analyze"
HELP = "phase-mix analysis of a workload: tokens/s by phase, prefill share, change points"


def add_arguments(p) -> None:
    p.add_argument("--workload", help="workload name in the store, or a trace file (not with --source)")
    add_source_flags(p, "read the mix from a Prometheus's engine token counters instead of a workload")
    p.add_argument("--bucket", default="10s", help="bucket width (default 10s)")
    p.add_argument("--decode-tbt", default="30ms",
                   help="seconds per decode token used for the Little's-law concurrency estimate (default 30ms)")
    p.add_argument("--json", action="store_true", help="JSON: summary, change points and every bucket")


def run(args) -> int:
    from gpuprobe.errors import UserError
    from gpuprobe.units import parse_duration
    from gpuprobe.workloads.analyze import analyze
    from gpuprobe.workloads.loading import read_workload

    bucket_s = parse_duration(args.bucket, "--bucket", positive=True)
    tbt_s = parse_duration(args.decode_tbt, "--decode-tbt", positive=True)  # 0: no decodes in flight
    if args.source:
        if args.workload:
            raise UserError("--workload and --source: give one (Prometheus has rates, not requests)")
        mix = _from_source(args, bucket_s, tbt_s)
    else:
        if not args.workload:
            raise UserError("--workload: required (or --source prometheus=URL)")
        df = read_workload(args.store, args.workload)
        if df.empty:
            raise UserError(f"workload {args.workload!r} has no requests")
        mix = analyze(df, bucket_s, tbt_s)
    if args.json:
        print(json.dumps(mix.to_dict()))
        return 0
    s = mix.summary
    ratio = f"{s['prompt_output_ratio']:.1f} : 1" if s["prompt_output_ratio"] else "n/a"
    counted = " finished" if s.get("requests_counted") == "finished" else ""
    # None when no token moved (an idle fleet's window): shown as n/a, not a TypeError
    share = "n/a" if s["prefill_token_share"] is None else f"{s['prefill_token_share']:.3f}"
    print(f"requests{counted} {s['requests']:,} over {s['span_s']:,.0f} s; prompt:output tokens {ratio}; "
          f"prefill share {share}")
    print(f"concurrent decodes (Little's law, TBT {s['decode_tbt_s_assumed'] * 1000:.0f} ms assumed): "
          f"mean {s['concurrent_decodes_est_mean']:.1f}, max {s['concurrent_decodes_est_max']:.1f}")
    if s["prefix_block_reuse"] is not None:
        print(f"prefix sharing: {s['prefix_block_reuse']:.1%} of 512-token blocks seen before")
    cps = ", ".join(f"{t:,.0f}s" for t in mix.change_points_s) or "none"
    print(f"prefill-share change points: {cps}")
    for w in s.get("warnings", []):
        print(f"warning: {w}")
    cols = ["start_s", "requests_per_s", "prefill_tokens_per_s", "decode_tokens_per_s", "prefill_token_share",
            "concurrent_decodes_est"]
    print(mix.buckets[cols].to_string(index=False, float_format=lambda v: f"{v:,.2f}", max_rows=40))
    return 0


def _from_source(args, bucket_s: float, tbt_s: float):
    from gpuprobe.errors import UserError
    from gpuprobe.sources import open_source, time_range
    from gpuprobe.sources.prom_mix import bucket_mix, mix_change_points, summary
    from gpuprobe.workloads.analyze import MixAnalysis

    src = open_source(args.source)
    start, end = time_range(args.since, args.until)
    buckets = bucket_mix(src.api, start, end, bucket_s, decode_tbt_s=tbt_s)
    if buckets.empty:
        raise UserError(f"--source {src}: no engine token counters between --since and --until "
                        f"(is Prometheus scraping the engines or their agents?)")
    return MixAnalysis(buckets, {**summary(buckets, bucket_s, tbt_s), "source": str(src),
                                 "since_s": start, "until_s": end,
                                 "warnings": list(src.api.warnings)}, mix_change_points(buckets))
