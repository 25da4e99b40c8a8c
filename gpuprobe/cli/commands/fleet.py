"""`gpuprobe fleet`: the serving hosts a Prometheus scrapes, grouped, with counters and mix."""
from __future__ import annotations

import json

NAME = "fleet"
HELP = "hosts and GPUs seen through Prometheus, grouped by a label, with their counters and mix"


def add_arguments(p) -> None:
    p.add_argument("--source", required=True, metavar="prometheus=URL",
                   help="the Prometheus (or Thanos, Mimir, VictoriaMetrics) that scrapes the agents")
    p.add_argument("--by", default="model", metavar="LABEL",
                   help="group hosts by this label: model, engine, or a target label such as host_group "
                        "(default model)")
    p.add_argument("--since", default="15m", help="start: a duration ago, epoch s or ISO time (default 15m)")
    p.add_argument("--until", default="now", help="end (default now)")
    p.add_argument("--json", action="store_true", help="JSON: hosts and groups")


def run(args) -> int:
    import re

    from gpuprobe.errors import UserError
    from gpuprobe.sources import open_source, time_range
    from gpuprobe.sources.fleet import fleet_groups, fleet_hosts

    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", args.by):
        raise UserError(f"--by: {args.by!r} is not a Prometheus label name")
    src = open_source(args.source)
    start, end = time_range(args.since, args.until)
    hosts = fleet_hosts(src, start, end, by=args.by)
    if hosts.empty:
        raise UserError(f"--source {src}: no gpuprobe agent series between --since and --until "
                        f"(is it scraping agents on :9400? see docs/fleet.md)")
    groups = fleet_groups(hosts)
    if args.json:
        print(json.dumps({"source": str(src), "since_s": start, "until_s": end, "by": args.by,
                          "hosts": _records(hosts), "groups": _records(groups),
                          "warnings": src.api.warnings}))
        return 0
    fmt = {"float_format": lambda v: f"{v:,.1f}", "na_rep": "missing", "index": False}
    print(f"{len(hosts)} hosts, {int(hosts['num_gpus'].sum())} GPUs, by {args.by} "
          f"({args.since} .. {args.until})")
    print(groups.to_string(**fmt))
    print()
    print(hosts.to_string(**fmt))
    for w in src.api.warnings:
        print(f"warning: {w}")
    return 0


def _records(df) -> list[dict]:
    return json.loads(df.to_json(orient="records"))
