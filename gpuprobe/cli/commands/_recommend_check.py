"""`gpuprobe recommend --check ID`, for the recommend command to call (a leading underscore:
not a command of its own). Prints predicted against measured since the switch."""
from __future__ import annotations

import json

from gpuprobe.argtypes import positive_int


def add_check_argument(p) -> None:
    p.add_argument("--check", type=positive_int, default=None, metavar="ID",
                   help="compare recommendation ID's prediction with what the server measured "
                        "since `gpuprobe apply` switched it (no search is run)")


def run_check(args) -> int:
    from gpuprobe.deploy.check import check_recommendation, check_text
    from gpuprobe.store import Store

    with Store.open(args.store, read_only=True) as store:
        result = check_recommendation(store, args.check)
    print(json.dumps(result) if getattr(args, "json", False) else check_text(result))
    return 0
