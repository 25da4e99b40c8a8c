"""`gpuprobe agent`: the sidecar that samples GPUs, the host and engine /metrics into the store."""
from __future__ import annotations

import argparse
import math

from gpuprobe.argtypes import http_url, nonneg_float, port, positive_float, positive_int, regex
from gpuprobe.errors import UserError
from gpuprobe.units import parse_duration

NAME = "agent"
HELP = "sample GPUs (NVML/GPM), the host and engine /metrics into the store; serve /metrics"


def duration(text: str) -> float:
    """argparse `type=`: a duration above 0 (no --duration at all runs until stopped)."""
    try:
        seconds = parse_duration(text)
    except UserError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration above 0 (e.g. 10s, 5m, 2h; "
                                         f"leave --duration out to run until stopped)")
    return seconds


def add_arguments(p) -> None:
    p.add_argument("--config", metavar="TOML", help="settings file ([agent] and [intervals]); flags win")
    p.add_argument("--duration", type=duration,
                   help="stop after this long, above 0 (e.g. 10s, 2h; default: until SIGTERM or Ctrl-C)")
    p.add_argument("--scrape", metavar="URL", type=http_url, action="append",
                   help="engine /metrics URL (repeatable)")
    p.add_argument("--metrics-port", type=port, help="port of the agent's /metrics (default 9400; 0 picks a free one)")
    p.add_argument("--listen", metavar="ADDR",
                   help="address of the agent's /metrics (default 127.0.0.1, this host only; "
                        "0.0.0.0 or a NIC's address for a Prometheus on another host)")
    p.add_argument("--no-metrics", action="store_true", help="serve no /metrics")
    for name, default in (("nvml", 1), ("gpm", 1), ("proc", 5), ("host", 1), ("scrape", 5)):
        p.add_argument(f"--interval-{name}", type=nonneg_float, metavar="S",
                       help=f"seconds between {name} samples (default {default}; 0 turns it off)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--process-pattern", metavar="REGEX", type=regex,
                     help="serving processes to watch, by command line")
    who.add_argument("--pid", type=positive_int, action="append",
                     help="serving process to watch (repeatable; it must exist)")
    p.add_argument("--flush-interval", type=positive_float, metavar="S",
                   help="seconds between store writes (default 1)")
    p.add_argument("--hostname", metavar="NAME",
                   help="the host name its samples and /metrics carry (default: this machine's; "
                        "give each of several agents on one machine its own)")
    p.add_argument("--max-buffer", type=positive_int, metavar="N",
                   help="samples held in memory while the store is locked or full (default 100000)")


def run(args) -> int:
    import asyncio

    import psutil

    from gpuprobe.collectors import config
    from gpuprobe.collectors.agent import Agent, new_run_id
    from gpuprobe.store import Store

    overrides = {
        "store": args.store, "scrape": args.scrape, "metrics_port": args.metrics_port,
        "listen": args.listen, "process_pattern": args.process_pattern, "pids": args.pid,
        "flush_interval": args.flush_interval, "max_buffer_samples": args.max_buffer,
        "duration": args.duration,
        **{f"interval_{n}": getattr(args, f"interval_{n}") for n in ("nvml", "gpm", "proc", "host", "scrape")},
    }
    cfg = config.load(args.config, overrides)
    if args.no_metrics:
        cfg = config.dataclasses.replace(cfg, metrics_port=None)
    gone = [pid for pid in cfg.pids if not psutil.pid_exists(pid)]
    if gone:
        raise UserError(f"--pid {gone[0]}: no such process (give the pid of a running server)")
    # A short busy timeout: a locked store must make a flush fail fast (the rows stay buffered),
    # not hold up the agent for seconds.
    with Store.open(cfg.store, busy_timeout_s=0.5) as store:
        run_id = new_run_id()
        agent = Agent(cfg, store, log=lambda m: print(m, flush=True), host=args.hostname)
        try:
            store.start_run(run_id, "agent", agent.host, {"scrape": list(cfg.scrape)})
        except Exception:
            pass  # the run record is a nicety; a locked store must not stop the agent
        try:
            stats = asyncio.run(agent.run())
        finally:
            try:
                store.end_run(run_id)
            except Exception:
                pass
    print(f"agent: produced {stats.num_produced} samples, wrote {stats.num_written}, "
          f"dropped {stats.num_dropped}, unwritten at exit {stats.num_buffered}", flush=True)
    return 0
