"""`gpuprobe workloads`: list, show, export or delete stored workloads."""
from __future__ import annotations

import json
import sys

from gpuprobe.argtypes import out_file

NAME = "workloads"
HELP = "list stored workloads, show one's summary, export it as CSV, or delete it"


def add_arguments(p) -> None:
    p.add_argument("action", choices=["list", "show", "export", "delete"], nargs="?", default="list")
    p.add_argument("name", nargs="?", help="workload name (show, export, delete); show and export also take a "
                                          "trace file or a bundled trace, azure-conv or azure-code")
    p.add_argument("--out", type=out_file, help="export: output CSV file (default: stdout)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args) -> int:
    from gpuprobe.errors import UserError
    from gpuprobe.store import Store
    from gpuprobe.workloads.loading import read_workload
    from gpuprobe.workloads.summary import summarize

    if args.action != "list" and not args.name:
        raise UserError(f"workloads {args.action}: give a workload name")
    if args.action == "export":
        df = read_workload(args.store, args.name).drop(columns=["idx"])
        try:
            df.to_csv(args.out or sys.stdout, index=False)
        except OSError as exc:
            if args.out is None:
                raise  # stdout's reader went away: main() handles that
            raise UserError(f"--out: cannot write {args.out} ({exc.strerror or exc})") from None
        return 0
    if args.action == "show":
        summary = summarize(read_workload(args.store, args.name), args.name)
        print(json.dumps(summary.to_dict()) if args.json else "\n".join(summary.lines()))
        return 0
    with Store.open(args.store, create=False) as store:
        if args.action == "list":
            df = store.workloads()[["name", "format", "num_requests", "source"]]
            print(df.to_json(orient="records") if args.json else (df.to_string(index=False) if len(df) else "no workloads"))
            return 0
        if not store.delete_workload(args.name):
            raise UserError(f"no workload named {args.name!r} in the store")
    print(f"deleted {args.name}")
    return 0
