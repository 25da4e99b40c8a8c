"""`gpuprobe fleet`: the serving hosts a Prometheus scrapes, grouped, with counters and mix."""
from __future__ import annotations

import json

from gpuprobe.cli.flags import add_source_flags

NAME = "fleet"
HELP = "hosts and GPUs seen through Prometheus, grouped by a label, with their counters and mix"


def add_arguments(p) -> None:
    add_source_flags(p, "the Prometheus (or Thanos, Mimir, VictoriaMetrics) that scrapes the agents",
                     since="15m", required=True)
    p.add_argument("--by", default="model", metavar="LABEL",
                   help="group hosts by this label: model, engine, or a target label such as host_group "
                        "(default model)")
    p.add_argument("--profile", metavar="FILE",
                   help="also recommend a layout per group with this profile (gpuprobe profile)")
    p.add_argument("--slo", default="chat", metavar="PRESET|SPEC",
                   help="with --profile: the SLO (chat, code, summarize, batch or ttft_p99=2s,...)")
    p.add_argument("--json", action="store_true", help="JSON: hosts and groups")


def run(args) -> int:
    import re

    from gpuprobe.errors import UserError
    from gpuprobe.sources import open_source, time_range
    from gpuprobe.sources.fleet import fleet_groups, fleet_hosts

    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", args.by):
        raise UserError(f"--by: {args.by!r} is not a Prometheus label name")
    chosen = _profile_and_slo(args) if args.profile else None  # a bad file fails before the queries
    src = open_source(args.source)
    start, end = time_range(args.since, args.until)
    hosts = fleet_hosts(src, start, end, by=args.by)
    if hosts.empty:
        raise UserError(f"--source {src}: no gpuprobe agent series between --since and --until "
                        f"(is it scraping agents on :9400? see docs/fleet.md)")
    groups = fleet_groups(hosts)
    recs = _recommend(args, src, start, end, hosts, *chosen) if chosen else {}
    if args.json:
        rows = _records(groups)
        for r in rows:
            if recs:
                r["recommendation"] = recs.get(r["group"])
        print(json.dumps({"source": str(src), "since_s": start, "until_s": end, "by": args.by,
                          "hosts": _records(hosts), "groups": rows,
                          "warnings": src.api.warnings}, default=float))
        return 0
    fmt = {"float_format": lambda v: f"{v:,.1f}", "na_rep": "missing", "index": False}
    print(f"{len(hosts)} hosts, {int(hosts['num_gpus'].sum())} GPUs, by {args.by} "
          f"({args.since} .. {args.until})")
    print(groups.to_string(**fmt))
    print()
    print(hosts.to_string(**fmt))
    for group, rec in recs.items():
        print(f"\n{args.by}={group}: " + (rec.get("decision") or f"no recommendation: {rec['error']}"))
        if "lengths" in rec:
            print(f"  lengths from {rec['lengths']}; {rec['devices_per_host']} device(s) per host; "
                  f"confidence {rec['confidence']['word']}")
    for w in src.api.warnings:
        print(f"warning: {w}")
    return 0


def _profile_and_slo(args) -> tuple:
    from gpuprobe.decide.slo import parse_slo
    from gpuprobe.perf.profile import load_profile

    return load_profile(args.profile), parse_slo(args.slo)


def _recommend(args, src, start: float, end: float, hosts, profile, slo) -> dict:
    import sys

    from gpuprobe.decide.fleet import group_recommendations

    say = None if args.json else (lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    return group_recommendations(src, start, end, hosts, args.by, profile, slo, progress=say)


def _records(df) -> list[dict]:
    return json.loads(df.to_json(orient="records"))
