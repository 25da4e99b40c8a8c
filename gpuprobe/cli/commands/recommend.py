"""`gpuprobe recommend`: which layout to run for a workload, with reasons, margin, confidence."""
from __future__ import annotations

import json
import sys

from gpuprobe.argtypes import nonneg_int, positive_float, positive_int
from gpuprobe.cli.commands._recommend_check import add_check_argument, run_check
from gpuprobe.cli.flags import add_slo_flags, add_source_flags

NAME = "recommend"
NO_LAYOUT_MEETS = 3  # exit status when no layout meets the SLO at any rate (README: Recommend)
HELP = "recommend a layout (monolithic, intra, cross xPyD) for a workload and SLO, with reasons"


def add_arguments(p) -> None:
    p.add_argument("--workload", metavar="NAME|FILE",
                   help="stored workload, trace file, or azure-conv / azure-code (bundled)")
    p.add_argument("--profile", metavar="FILE", help="profile JSON (gpuprobe profile)")
    add_slo_flags(p)
    p.add_argument("--devices", type=nonneg_int, default=2, metavar="N",
                   help="devices the deployment has; cross xPyD fits within them (default 2)")
    p.add_argument("--layouts", default="monolithic,intra,cross",
                   help="layouts to weigh (default monolithic,intra,cross)")
    p.add_argument("--link", default=None, metavar="nvlink|ib|roce|tcp|GBPS",
                   help="cross's KV link (default: the profile's)")
    p.add_argument("--cost-per-device-hour", type=positive_float, default=None, metavar="USD",
                   help="price of a device-hour: adds cost per million output tokens")
    p.add_argument("--limit", type=positive_int, default=None, metavar="N",
                   help="first N requests only (default: all)")
    p.add_argument("--token-scale", type=positive_float, default=1.0, metavar="F",
                   help="scale prompt and output lengths (default 1)")
    p.add_argument("--rate", type=positive_float, default=None, metavar="RPS",
                   help="set the workload's mean rate, requests/s (burst shape kept)")
    p.add_argument("--rate-scale", type=positive_float, default=1.0, metavar="F",
                   help="what-if: F times the requests per second (default 1)")
    p.add_argument("--prompt-scale", type=positive_float, default=1.0, metavar="F",
                   help="what-if: prompts F times longer (default 1)")
    p.add_argument("--forecast", action="store_true",
                   help="weigh the layouts on the forecast load (upper 80%% of requests/s) and mix")
    p.add_argument("--forecast-file", metavar="FILE", default=None,
                   help="a forecast as `gpuprobe forecast --json` prints it (implies --forecast)")
    p.add_argument("--bucket", default="10s", help="--forecast: bucket (default 10s)")
    p.add_argument("--horizon", default="60s", help="--forecast: horizon (default 60s)")
    add_source_flags(p, "weigh the layouts on the rates a Prometheus holds instead of a workload "
                        "(with --since, --until and optionally --group LABEL=VALUE)")
    p.add_argument("--group", metavar="LABEL=VALUE", help="--source: only the hosts with this label")
    add_check_argument(p)
    p.add_argument("--seed", type=nonneg_int, default=0, help="simulator noise seed (default 0)")
    p.add_argument("--json", action="store_true", help="print the recommendation as JSON")


def run(args) -> int:
    from gpuprobe.errors import UserError
    if args.check is not None:
        return run_check(args)
    if args.workload and args.source:  # "needs one of" read as if neither had been given
        raise UserError("--workload and --source: give one (the workload's requests, or the "
                        "rates a Prometheus holds)")
    if not args.profile or not (args.workload or args.source):
        raise UserError("recommend needs --profile and one of --workload or --source (or --check ID)")
    from gpuprobe.decide.answer import NoLayoutMeets
    from gpuprobe.decide.decision import DecisionOptions, WhatIf, run_decision
    from gpuprobe.decide.recommendation import clean, dumps
    from gpuprobe.decide.slo import slo_from_flags
    from gpuprobe.perf.profile import load_profile
    from gpuprobe.store import Store
    from gpuprobe.workloads.loading import load_named_workload

    slo = slo_from_flags(args.slo, args.slo_ttft, args.slo_tbt)
    layouts = tuple(x.strip() for x in args.layouts.split(",") if x.strip())
    if not layouts or any(x not in ("monolithic", "intra", "cross") for x in layouts):
        raise UserError("--layouts: choose from monolithic, intra, cross")
    profile = load_profile(args.profile)
    wl = _source_workload(args) if args.source else load_named_workload(args.store, args.workload)
    opts = DecisionOptions(
        max_devices=args.devices, layouts=layouts, link=args.link,
        cost_per_device_hour=args.cost_per_device_hour, seed=args.seed,
        what_if=WhatIf(args.rate, args.rate_scale, args.prompt_scale, args.token_scale, args.limit),
        forecast=_forecast_file(args.forecast_file) if args.forecast_file else None,
        fit_forecast=_fit_forecast(args) if args.forecast and not args.forecast_file else None)
    progress = None if args.json else (lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    with Store.open(args.store) as store:
        try:
            rec = run_decision(wl, profile, slo, opts, store, progress=progress,
                               workload_name=args.workload or f"{args.source} {args.group or ''}".strip())
        except NoLayoutMeets as exc:  # an answer, not a broken input: said as one, exit 3
            print(json.dumps(clean(exc.answer)) if args.json else str(exc),
                  file=sys.stdout if args.json else sys.stderr)
            return NO_LAYOUT_MEETS
    print(dumps(rec) if args.json else render(rec))
    return 0


def _source_workload(args):
    import re

    from gpuprobe.errors import UserError
    from gpuprobe.sources import open_source, time_range
    from gpuprobe.sources.prom_mix import bucket_mix
    from gpuprobe.sources.prom_workload import HISTOGRAMS, length_histogram, workload_from_rates

    label = value = None
    if args.group:
        m = re.fullmatch(r"([a-zA-Z_][a-zA-Z0-9_]*)=(.+)", args.group)
        if not m:
            raise UserError(f"--group: {args.group!r}: expected LABEL=VALUE, e.g. host_group=chat")
        label, value = m.groups()
    src = open_source(args.source)
    start, end = time_range(args.since, args.until)
    bucket_s = min(60.0, max((end - start) / 4, 1.0))
    mix = bucket_mix(src.api, start, end, bucket_s, by=label, agents_only=label is not None)
    if label is not None:
        mix = mix[mix["group"] == value]
    matcher = f'{label}="{value}"' if label else ""
    hists = [length_histogram(src.api, HISTOGRAMS[k], start, end, matcher) for k in ("prompt", "output")]
    return workload_from_rates(mix, bucket_s, *hists, seed=args.seed)


def _forecast_file(path: str) -> dict:
    from gpuprobe.decide.forecast_workload import check_forecast
    from gpuprobe.errors import UserError
    try:
        with open(path) as f:
            forecast = json.load(f)
        check_forecast(forecast)
    except (OSError, ValueError, UserError) as e:
        raise UserError(f"--forecast-file {path}: {e}") from None
    return forecast


def _fit_forecast(args) -> tuple[float, float]:
    from gpuprobe.units import parse_duration
    return parse_duration(args.bucket, "--bucket"), parse_duration(args.horizon, "--horizon")


def render(rec) -> str:
    """The human form of a Recommendation: the answer in words (gpuprobe.decide.answer, as
    the dashboard and the report say it), then the candidate table, reasons and id."""
    from gpuprobe.decide.answer import answer
    a = answer(rec)
    lines = [a.decision, "", f"margin:      {a.margin}", f"SLO:         {a.slo}",
             f"confidence:  {a.confidence}", f"cost:        {a.cost}", f"decided on:  {a.workload}",
             f"would change: {a.changes}", *(f"assumed:     {c}" for c in a.caveats), "",
             f"{'candidate':<26} {'goodput/dev':>11} {'bracket':>15} {'TTFT p99':>9} {'TBT p99':>9} "
             f"{'at offered: met':>16}  $/Mtok"]
    for r in rec.candidates:
        a_, o = r["at_goodput"], r.get("at_offered")
        hi = r["goodput_bracket_rps_per_device"][1]
        br = f"{r['max_goodput_rps_per_device']:.3g}-{hi:.3g}" if hi else "-"
        met = f"{o['slo_attainment']:.1%}" if o else ""
        cost = r.get("cost_per_million_output_tokens")
        goodput = (">=" if r.get("capped") else "") + f"{r['max_goodput_rps_per_device']:.3g}"
        lines.append(f"{r['label']:<26} {goodput:>11} {br:>15} "
                     f"{_s(a_.get('ttft_p99_s')):>9} {_s(a_.get('tbt_p99_s')):>9} {met:>16}"
                     + (f"  {cost:.3g}" if cost else ""))
    if any(r.get("capped") for r in rec.candidates):
        lines.append(">= : the workload was too short to find this candidate's limit; its goodput is at least this")
    m = rec.margin
    lines += ["", f"runner-up setting: {rec.runner_up} ({m:+.1%})" if m is not None else "runner-up: none",
              "reasons:"]
    lines += [f"  - {r['text']}" for r in rec.reasons]
    if rec.forecast:
        lines += ["forecast:", *(f"  {x}" for x in rec.forecast["lines"])]
    s = rec.search
    rep = f", the workload repeated up to {s['repeats']} times" if s.get("repeats", 1) > 1 else ""
    pruned = f" ({len(s['pruned'])} more bounded below the best)" if s.get("pruned") else ""
    lines.append(f"searched {s['candidates']} candidates{pruned}, {s['simulations']} simulations on "
                 f"samples of up to {s['sample_requests']} requests{rep}, {s['seconds']:.1f} s; stored as "
                 f"recommendation {rec.id}")
    return "\n".join(lines)


def _s(v) -> str:
    return "-" if v is None or v != v else (f"{v * 1e3:.1f}ms" if v < 1 else f"{v:.2f}s")
