"""`gpuprobe validate`: predicted vs measured latency per layout on this machine."""
from __future__ import annotations

import argparse
import json
import math

from gpuprobe.argtypes import (fraction, nonneg_float, out_file, positive_float,
                                   positive_int)

NAME = "validate"
# Defaults that depend on --device. On the CPU: the tiny model on 2 cores. On a GPU: an 8B
# model, whose KV is 128 KiB a token and whose eager decode step is 30-80 ms on an H200, so
# 30 requests at half their traced lengths take about 3 minutes a layout (three replays).
# On the CPU a calibration pass follows every replay (--interleave): a shared VM's cores
# change speed from minute to minute, and passes spread over the replays sample the same
# minutes. On a GPU a pass takes about a minute and the device's speed holds: one pass.
DEVICE_DEFAULTS = {"cpu": {"limit": 300, "token_scale": 0.1, "kv_cache_mb": None,
                           "interleave": True, "budget_s": 600.0},
                   "cuda": {"limit": 30, "token_scale": 0.5, "kv_cache_mb": 16384,
                            "interleave": False, "budget_s": 1800.0}}
HELP = "profile the reference server, replay a workload per layout, compare with the simulator"
MAX_LOAD = 2.0


def load_fraction(text: str) -> float:
    """--load: above 0 and at most MAX_LOAD. Past 1 the queue grows for the whole replay, so
    every latency measures the backlog, not the layout, and the run takes ever longer."""
    value = positive_float(text)
    if value > MAX_LOAD:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_LOAD:g}, got {value:g} (a fraction of the monolithic "
            f"capacity: past 1 the queue only grows, so the latencies measure the backlog "
            f"and the run takes ever longer)")
    return value


def duration(text: str) -> float:
    """--budget: a positive duration (10m, 600s, 600)."""
    from gpuprobe.errors import UserError
    from gpuprobe.units import parse_duration

    try:
        value = parse_duration(text, "--budget")
    except UserError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[-1]) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text!r}")
    return value


def html_file(text: str) -> str:
    """--plot: an HTML file to write (an image name would get HTML under a false suffix)."""
    path = out_file(text)
    if not path.lower().endswith((".html", ".htm")):
        raise argparse.ArgumentTypeError(f"{text!r}: the plot is interactive HTML; give a path "
                                         f"ending in .html")
    return path


def request_count(text: str) -> int:
    """--limit: at least 2, as the replay rate is set from the gaps between requests."""
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be at least 2 (the replay rate is set from the "
                                         f"gaps between requests), got {value}")
    return value


def add_arguments(p) -> None:
    p.add_argument("--workload", required=True, metavar="NAME|FILE",
                   help="stored workload, trace file, or azure-conv / azure-code (bundled)")
    p.add_argument("--model", default="tiny", help="reference server model (default tiny)")
    p.add_argument("--layouts", default="monolithic,intra,cross",
                   help="comma-separated layouts (default monolithic,intra,cross)")
    p.add_argument("--load", type=load_fraction, default=None,
                   help=f"offered load as a fraction of the simulated monolithic capacity, at "
                        f"most {MAX_LOAD:g}, at the workload's busiest stretch (see "
                        f"--load-basis; default 0.5). Never raised: where a replay at this "
                        f"load would not fit the plan, fewer requests are replayed, a window "
                        f"around the busiest stretch")
    p.add_argument("--load-basis", choices=["peak", "mean"], default="peak",
                   help="what --load measures: 'peak' (default) the rate of the busiest 20%% "
                        "of the requests, idle gaps of the replay cut to --max-idle; 'mean' the "
                        "mean rate, gaps kept")
    p.add_argument("--max-idle", type=nonneg_float, default=1.0, metavar="S",
                   help="peak basis: shorten gaps between replayed arrivals to at most S "
                        "seconds (default 1; 0 keeps them)")
    p.add_argument("--rate", type=positive_float, default=None, metavar="R",
                   help="offered request rate, req/s (overrides --load)")
    p.add_argument("--limit", type=request_count, default=None,
                   help="requests from the workload (default 300; 30 on cuda)")
    p.add_argument("--token-scale", type=positive_float, default=None,
                   help="multiply prompt and output lengths (default 0.1, which fits the tiny "
                        "model; 0.5 on cuda)")
    p.add_argument("--slo-ttft", type=positive_float, default=0.5, metavar="S", help="TTFT SLO, s (default 0.5)")
    p.add_argument("--slo-tpot", "--slo-tbt", dest="slo_tbt", type=positive_float, default=0.05,
                   metavar="S", help="TPOT SLO: each request's mean time per output token, s "
                                     "(default 0.05; --slo-tbt: older name)")
    p.add_argument("--prefill-share", type=fraction, default=0.5,
                   help="intra/cross: cores for prefill (default 0.5)")
    p.add_argument("--replays", type=positive_int, default=3,
                   help="replays per layout; measured metrics are their medians (default 3)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="the reference server's device (default cpu)")
    p.add_argument("--kv-cache-mb", type=positive_int, default=None, metavar="MIB",
                   help="KV cache per worker, MiB (default: the server's 256 on cpu, "
                        "16384 on cuda, which an 8B model needs for its batches)")
    p.add_argument("--no-speed-probe", action="store_true",
                   help="do not correct for the CPU cores' own speed drift between calibration "
                        "and replay (a probe process times a tiny engine run on each core)")
    p.add_argument("--interleave", action=argparse.BooleanOptionalAction, default=None,
                   help="calibrate each layout again after every replay and fit its profile on "
                        "all passes pooled, so the calibration samples the machine over the same "
                        "minutes as the replays (default on cpu; about 2 minutes more than "
                        "--no-interleave, which calibrates once before the replays and "
                        "rechecks after them; see docs/validate.md)")
    p.add_argument("--budget", type=duration, default=None, metavar="DURATION",
                   help="cap on the whole run, every phase (default 10m on cpu, 30m on cuda); "
                        "validate prints its plan before the first replay and shrinks it to "
                        "fit, or stops with a line saying what it needs")
    p.add_argument("--no-host-effects", action="store_true",
                   help="predict without the host effects validate measures (the front's CPU "
                        "and the cores' speed drift; see docs/validate.md): the prediction "
                        "`gpuprobe simulate --profile` gives for the same schedule")
    p.add_argument("--profile-out", type=out_file, metavar="FILE", default=None,
                   help="write the profile validate assembles from its layouts' calibrations "
                        "(model, target and time in its meta) for simulate and recommend")
    p.add_argument("--no-store", action="store_true",
                   help="do not keep the result in the store's validations table")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--plot", type=html_file, metavar="FILE.html", default=None,
                   help="also write predicted against measured, per layout and metric, as an "
                        "HTML plot (measured with its range over the replays)")


def _options(args):
    from gpuprobe.errors import UserError
    from gpuprobe.perf.metrics import Slo
    from gpuprobe.sim.layouts import LAYOUTS
    from gpuprobe.validate.options import ValidateOptions

    layouts = tuple(x.strip() for x in args.layouts.split(",") if x.strip())
    bad = [x for x in layouts if x not in LAYOUTS]
    if bad or not layouts:
        raise UserError(f"--layouts: unknown {bad or 'empty list'}; choose from {', '.join(LAYOUTS)}")
    dflt = DEVICE_DEFAULTS[args.device]
    limit = dflt["limit"] if args.limit is None else args.limit
    token_scale = dflt["token_scale"] if args.token_scale is None else args.token_scale
    kv_mb = args.kv_cache_mb or dflt["kv_cache_mb"]
    _check_model(args.model)
    return ValidateOptions(model=args.model, layouts=layouts, load=args.load,
                           load_basis=args.load_basis, max_idle_s=args.max_idle or None,
                           rate_rps=args.rate,
                           limit=limit, token_scale=token_scale,
                           slo=Slo(args.slo_ttft, args.slo_tbt), prefill_share=args.prefill_share,
                           replays=args.replays, device=args.device,
                           server_opts=(("kv_cache_mb", kv_mb),) if kv_mb else (),
                           speed_probe=not args.no_speed_probe,
                           host_effects=not args.no_host_effects,
                           interleave=dflt["interleave"] if args.interleave is None
                           else args.interleave,
                           budget_s=dflt["budget_s"] if args.budget is None else args.budget)


def _check_model(name: str) -> None:
    """UserError now, not minutes later in the first server, for a model that does not exist."""
    from gpuprobe.errors import UserError
    from gpuprobe.llama.config import resolve_model
    from gpuprobe.llama.gguf_loader import ModelLoadError

    try:
        resolve_model(name)
    except (ValueError, ModelLoadError) as exc:
        raise UserError(f"--model {name}: {exc}") from None


def _fmt(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4g}"


def run(args) -> int:
    from gpuprobe.cli.commands.serve import require_device
    from gpuprobe.validate.run import run_validate
    from gpuprobe.workloads.loading import load_named_workload

    opts = _options(args)
    require_device(opts.device)
    _stop_cleanly_on_sigterm()
    wl = load_named_workload(args.store, args.workload)
    out = run_validate(wl, opts, progress=True)
    if args.profile_out:  # before anything else can fail: the calibration is the costly part
        _write_profile(out["profile"], args.profile_out)
    if not args.no_store:
        _store(args.store, args.workload, opts, out)
    if args.json:
        print(json.dumps({k: v for k, v in out.items() if k != "profile"}, default=float))
    else:
        _print_table(out)
    if args.plot:  # after the results are out: a plot that cannot be written loses nothing
        from gpuprobe.errors import UserError
        from gpuprobe.validate.plot import write_plot

        try:
            write_plot(out, args.plot)
        except OSError as exc:
            raise UserError(f"--plot: cannot write {args.plot}: {exc.strerror or exc}") from exc
    return 0


def _stop_cleanly_on_sigterm() -> None:
    """SIGTERM (a `timeout`, a job stopped) ends the run the way Ctrl-C does, so the servers
    it started are stopped on the way out instead of left holding the cores."""
    import signal
    import threading

    def stop(signum, frame):
        raise KeyboardInterrupt
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)


def _write_profile(profile: dict, path: str) -> None:
    from gpuprobe.errors import UserError

    try:
        with open(path, "w") as fh:
            json.dump(profile, fh, indent=1, default=float)
    except OSError as exc:
        raise UserError(f"--profile-out: cannot write {path}: {exc.strerror or exc}") from exc


def _store(store_path, workload: str, opts, out: dict) -> None:
    """The result in the store's validations table (schema 5), for recommend and the
    dashboard: which layout won, measured and predicted, and whether the bar was met."""
    from gpuprobe.store import Store

    body = {k: v for k, v in out.items() if k != "profile"}
    import socket

    with Store.open(store_path) as store:
        out["validation_id"] = store.insert_validation({
            "host": socket.gethostname(), "workload": workload, "model": opts.model, "device": opts.device,
            "profile": json.dumps(out["profile"], default=float),
            "best_measured": out["best_measured"], "best_predicted": out["best_predicted"],
            "bar_met": int(bool(out["bar_met"])),
            "body": json.dumps(body, default=float)})


def _pct(v) -> str:
    return "-" if v is None or v != v else f"{v:.0%}"


def _print_table(out: dict) -> None:
    ranges = out.get("measured_range", {})
    print(f"{'layout':<11} {'metric':<17} {'predicted':>10} {'measured':>10} {'rel_error':>9} "
          f"{'replay spread':>13}")
    for r in out["rows"]:
        span = ranges.get(r["layout"], {}).get(r["metric"])
        sp = (span[1] - span[0]) / r["measured"] if span and r["measured"] else None
        print(f"{r['layout']:<11} {r['metric']:<17} {_fmt(r['predicted']):>10} "
              f"{_fmt(r['measured']):>10} {_fmt(r['rel_error']):>9} "
              f"{'-' if sp is None else f'{sp:.0%}':>13}")
    print("replay spread: (max - min) / median of the measured figure over the replays")
    for layout, s in out["summary"].items():
        print(f"{layout}: median |rel error| over p50 metrics {_fmt(s['median_abs_rel_error_p50'])}; "
              f"SLO attainment predicted {_fmt(s['slo_attainment_predicted'])}, "
              f"measured {_fmt(s['slo_attainment_measured'])}")
    print(f"best_measured: {out['best_measured']}  best_predicted: {out['best_predicted']}")
    for layout, per_replay in (out.get("speed_drift") or {}).items():
        shown = "; ".join(", ".join(f"{k.split('.')[-1]} {v:.2f}" for k, v in f.items())
                          for f in per_replay)
        print(f"{layout}: core speed vs calibration per replay (>1 slower): {shown}")
    plain = out.get("without_host_effects") or {}
    if out.get("host_effects", {}).get("measured"):
        print("without host effects (as `simulate --profile` predicts): " + "; ".join(
            f"{k} median |rel error| {_fmt(v.get('median_abs_rel_error_p50'))}"
            for k, v in plain.items() if k != "best_predicted")
            + f"; best_predicted {plain.get('best_predicted')}")
    at_server = out.get("server_tbt") or {}
    if at_server:
        print("tbt at the server's front (the load client's reading left out): " + "; ".join(
            f"{k} p50 {_fmt(v['tbt_p50_s'])} p99 {_fmt(v['tbt_p99_s'])}" for k, v in at_server.items()))
    pool = out.get("tbt_pool") or {}
    if pool:
        print("tbt pool (measured): " + "; ".join(
            f"{k} {p['tbt_gaps']:.0f} gaps, {_pct(p['tbt_first_share'])} of them a request's "
            f"first ({_pct(p['tbt_p99_first_share'])} of those at or above p99)"
            for k, p in pool.items())
            + " (a first gap holds the KV hand-over on a split layout)")
    for note in out.get("notes", []):
        print(note)
