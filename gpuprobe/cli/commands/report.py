"""`gpuprobe report`: the management report (HTML and PDF) for a workload's layout decision."""
from __future__ import annotations

import json
import sys

from gpuprobe.argtypes import out_file, positive_float, positive_int
from gpuprobe.cli.flags import add_source_flags

NAME = "report"
HELP = "write the management report (one HTML file, and a PDF) for a workload's layout decision"


def add_arguments(p) -> None:
    p.add_argument("--workload", required=True, metavar="NAME|FILE",
                   help="stored workload, trace file, or azure-conv / azure-code (bundled)")
    p.add_argument("--recommendation", type=positive_int, metavar="ID",
                   help="the recommendation to report (default: the workload's latest)")
    p.add_argument("--cost-per-device-hour", type=positive_float, metavar="USD",
                   help="price of one device-hour, for the cost per million output tokens")
    p.add_argument("--out", required=True, type=out_file, metavar="report.html", help="the HTML file")
    p.add_argument("--pdf", type=out_file, metavar="report.pdf", help="also print a PDF (needs chromium)")
    add_source_flags(p, "read the GPU counters by phase from the fleet's Prometheus (with --since, --until)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")


def run(args) -> int:
    from gpuprobe.errors import GpuprobeError
    from gpuprobe.report import partial_note, write_report
    from gpuprobe.store import Store

    if not args.out.lower().endswith((".html", ".htm")):
        from gpuprobe.errors import UserError
        raise UserError(f"--out {args.out}: the report is HTML; give a path ending in .html")
    say = None if args.json else (lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    src = rng = None
    if args.source:
        from gpuprobe.sources import open_source, time_range
        src, rng = open_source(args.source), time_range(args.since, args.until)
    with Store.open(args.store) as store:
        try:
            out = write_report(store, args.workload, args.out, args.pdf, args.recommendation,
                               args.cost_per_device_hour, progress=say, source=src, source_range=rng)
        except GpuprobeError as exc:
            if args.pdf and "PDF" in str(exc):
                print(f"wrote {args.out}", flush=True)
            raise
    if args.json:
        print(json.dumps(out))
        return 0
    print(out["sentence"])
    print(f"wrote {out['html']}" + (f" and {out['pdf']}" if out["pdf"] else ""))
    if partial_note(out):
        print(partial_note(out))
    return 0
