"""`gpuprobe store`: inspect the store and apply retention."""
from __future__ import annotations

import json

NAME = "store"
HELP = "inspect the store file and apply retention to old samples"


def add_arguments(p) -> None:
    p.add_argument("action", choices=["info", "retention"],
                   help="info: schema version and row counts; retention: drop or thin old samples")
    p.add_argument("--max-age", default="7d", help="retention: age beyond which samples go (default 7d)")
    p.add_argument("--mode", choices=["delete", "downsample"], default="downsample",
                   help="retention: delete old samples, or keep one mean per --resolution")
    p.add_argument("--resolution", default="60s", help="retention: bucket kept by --mode downsample")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args) -> int:
    from gpuprobe.errors import UserError
    from gpuprobe.store import Store
    from gpuprobe.store.reads import table_counts
    from gpuprobe.units import parse_duration

    max_age_s = parse_duration(args.max_age, "--max-age")
    resolution_s = parse_duration(args.resolution, "--resolution")
    if resolution_s < 0.001:  # 0 would divide by zero, and finer thins nothing
        raise UserError(f"--resolution: {args.resolution!r} must be at least 1ms")
    with Store.open(args.store, create=False) as store:
        if args.action == "retention":
            removed = store.apply_retention(max_age_s, args.mode, resolution_s)
            out = {"removed_rows": removed, "mode": args.mode}
        else:
            tables = ["samples", "series", "requests", "steps", "workloads", "workload_requests",
                      "layout_events", "events", "forecasts", "recommendations", "runs"]
            out = {"path": str(store.path), "schema_version": store.schema_version(),
                   "rows": table_counts(store, tables)}
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")
    return 0
