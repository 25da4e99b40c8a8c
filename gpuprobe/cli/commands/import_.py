"""`gpuprobe import`: read a trace file into the store as a named workload."""
from __future__ import annotations

import json
import sys

NAME = "import"
HELP = "import a trace (Azure, BurstGPT, Mooncake, a recorded trace, or any CSV/JSONL with --map)"


def add_arguments(p) -> None:
    p.add_argument("file", help="trace file (CSV, JSONL, or a gpuprobe store for recorded traces)")
    p.add_argument("--name", required=True, help="workload name to store it under")
    p.add_argument("--format", default="auto",
                   choices=["auto", "azure", "burstgpt", "mooncake", "recorded", "csv", "jsonl"],
                   help="trace format (default: detect from the header)")
    p.add_argument("--map", dest="mapping", metavar="KEY=COL,...",
                   help="generic format: timestamp=COL,prompt_tokens=COL,output_tokens=COL[,model=COL]")
    p.add_argument("--time-unit", choices=["s", "ms", "us", "ns", "iso"], help="generic format: timestamp unit")
    p.add_argument("--run-id", help="recorded format: import one run of a store (default: every run, "
                                    "as recorded by the replay client if the store has its rows, else "
                                    "by the tap, else by the server; the other rows are counted as dropped)")
    p.add_argument("--replace", action="store_true", help="overwrite a workload of the same name")
    p.add_argument("--skip-bad", action="store_true",
                   help="skip broken rows (and rows too far out of order) and report them by reason; "
                        "rows out of order by under 100,000 rows are always sorted into place")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args) -> int:
    from gpuprobe.store import Store
    from gpuprobe.workloads.pipeline import ImportOptions, import_trace

    opts = ImportOptions(mapping=args.mapping, time_unit=args.time_unit, run_id=args.run_id)
    with Store.open(args.store) as store:
        result = import_trace(store, args.file, args.name, args.format, args.replace, args.skip_bad, opts)
    if args.json:
        print(json.dumps(result.summary.to_dict()))
    else:
        print("\n".join(result.summary.lines()) + f"\nformat         {result.format}")
    notes = [(f"skipped {n:,} rows: {r}") for r, n in result.skipped.items()]
    notes += [(f"dropped {n:,} rows: {r}") for r, n in result.dropped.items()]
    if result.num_reordered:
        notes.append(f"sorted {result.num_reordered:,} rows that were out of order in the file")
    for note in notes:
        print(f"gpuprobe import: {note}", file=sys.stderr)
    return 0
