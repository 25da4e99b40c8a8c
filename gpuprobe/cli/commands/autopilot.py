"""`gpuprobe autopilot`: keep a live reference server's layout ahead of its mix; `autopilot log`
prints the audit log of every decision."""
from __future__ import annotations

import json

from gpuprobe.argtypes import positive_float, positive_int
from gpuprobe.cli.flags import add_server_flags

NAME = "autopilot"
HELP = "switch a live server's layout ahead of its prefill/decode mix, with hysteresis and an audit log"


def add_arguments(p) -> None:
    p.add_argument("what", nargs="?", choices=["log"], help="log: print the audit log instead of running")
    add_server_flags(p)
    p.add_argument("--interval", default="30s", help="time between decisions (default 30s)")
    p.add_argument("--window", default=None, help="how far back each decision reads (default: one interval)")
    p.add_argument("--slo", default=None, help="a preset (chat, code, summarize, batch) or 'ttft_p99=2s,tpot_p90=100ms,itl_p99=200ms,attain=0.9' (default chat)")
    p.add_argument("--candidates", choices=["all", "window"], default="all",
                   help="all: recommend's full search each interval (needs a window of many requests); "
                        "window: the three default layouts at the window's own rate (intervals of seconds)")
    p.add_argument("--no-forecast", action="store_true",
                   help="take the last window as the next interval instead of forecasting it")
    p.add_argument("--history", default="10m", help="how far back the forecaster reads (default 10m)")
    p.add_argument("--devices", type=positive_int, default=2,
                   help="devices recommend may lay out (default 2); cross xPyD takes x + y workers, which a server given --prefill-workers/--decode-workers runs on them")
    p.add_argument("--profile", metavar="FILE", help="cost-model profile JSON (gpuprobe profile) for the predictions")
    p.add_argument("--dry-run", action="store_true", help="decide and log; switch nothing")
    p.add_argument("--min-dwell", default="5m", help="how long a layout, and a challenger's lead, must hold before a switch (default 5m)")
    p.add_argument("--min-gain", type=positive_float, default=0.1,
                   help="predicted gain needed: relative goodput per device, or absolute SLO attainment (default 0.1)")
    p.add_argument("--cooldown", default="2m", help="no switch within this long of the last one tried (default 2m)")
    p.add_argument("--for", dest="run_for", default=None, help="stop after this long (default: until SIGTERM or Ctrl-C)")
    p.add_argument("--json", action="store_true", help="log: print the decisions as JSON")


def run(args) -> int:
    if args.what == "log":
        return _log(args)
    import signal
    import threading

    from gpuprobe.autopilot.inputs import parse_slo
    from gpuprobe.autopilot.loop import Autopilot, AutopilotConfig
    from gpuprobe.autopilot.policy import PolicyConfig
    from gpuprobe.deploy.admin_client import AdminClient
    from gpuprobe.errors import UserError
    from gpuprobe.perf.profile import load_profile
    from gpuprobe.server.admin import load_token
    from gpuprobe.store import Store
    from gpuprobe.units import parse_duration

    if not args.target:
        raise UserError("--target: required (the server whose layout to drive)")
    if not args.profile:
        raise UserError("--profile: required (gpuprobe profile --spec GPU or --target URL makes one)")
    interval = parse_duration(args.interval, "--interval", positive=True)
    cfg = AutopilotConfig(
        args.target, interval,
        parse_duration(args.window, "--window", positive=True) if args.window is not None else None,
        args.dry_run, PolicyConfig(parse_duration(args.min_dwell, "--min-dwell"), args.min_gain,
                                   parse_duration(args.cooldown, "--cooldown")),
        args.candidates, args.devices, not args.no_forecast,
        parse_duration(args.history, "--history", positive=True))
    run_for = parse_duration(args.run_for, "--for", positive=True) if args.run_for is not None else None
    slo, profile = parse_slo(args.slo), load_profile(args.profile)
    token, _ = load_token(args.admin_token_file)
    stop = threading.Event()
    # SIGTERM and Ctrl-C only set the flag: the decision in flight (a switch included) finishes.
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    if run_for:
        timer = threading.Timer(run_for, stop.set)
        timer.daemon = True
        timer.start()
    with Store.open(args.store) as store:
        admin = AdminClient(args.target, token, timeout_s=5.0, switch_timeout_s=180.0)
        ap = Autopilot(store, admin, profile, slo, cfg,
                       say=lambda line: print(line, flush=True))
        try:
            n = ap.run(stop)
        finally:
            stop.set()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    print(f"autopilot stopped after {n} decisions")
    return 0


def _log(args) -> int:
    from gpuprobe.autopilot.audit import lines, records
    from gpuprobe.store import Store

    with Store.open(args.store, create=False) as store:
        recs = records(store.decisions(args.target))
    if args.json:
        print(json.dumps(recs, default=str))
    else:
        print("\n".join(lines(recs)) if recs else "no decisions recorded")
    return 0
