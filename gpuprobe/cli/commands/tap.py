"""`gpuprobe tap`: a recording reverse proxy in front of an OpenAI-compatible server."""
from __future__ import annotations

import argparse

from gpuprobe.argtypes import http_url, port, positive_float

NAME = "tap"
HELP = "proxy an OpenAI-compatible server and record each request's timing into the store"


def host_port(text: str) -> tuple[str, int]:
    """argparse `type=` for --listen: HOST:PORT with a port 0-65535."""
    host, _, number = text.rpartition(":")
    if not host:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, port(number)


def add_arguments(p) -> None:
    p.add_argument("--upstream", required=True, metavar="URL", type=http_url,
                   help="the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--listen", default="127.0.0.1:9000", metavar="HOST:PORT", type=host_port,
                   help="where clients connect (default 127.0.0.1:9000; port 0 picks a free one)")
    p.add_argument("--flush-interval", type=positive_float, default=1.0, metavar="S",
                   help="seconds between store writes (default 1)")


def run(args) -> int:
    import asyncio
    import time
    import uuid

    from gpuprobe.store import Store

    with Store.open(args.store, busy_timeout_s=0.5) as store:
        run_id = f"tap-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        store.start_run(run_id, "tap", meta={"upstream": args.upstream})
        try:
            num = asyncio.run(_serve(args.upstream, store, run_id, *args.listen, args.flush_interval))
        finally:
            store.end_run(run_id)
    print(f"tap: recorded {num} requests (run {run_id})", flush=True)
    return 0


async def _serve(upstream: str, store, run_id: str, host: str, port: int, flush_s: float) -> int:
    import asyncio
    import signal

    from aiohttp import web

    from gpuprobe.collectors.tap import Tap
    from gpuprobe.errors import UserError

    tap = Tap(upstream, store, run_id=run_id, flush_interval_s=flush_s, log=lambda m: print(m, flush=True))
    runner = web.AppRunner(tap.app(), access_log=None)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            raise UserError(f"--listen: cannot listen on {host}:{port} ({exc.strerror or exc})") from None
        print(f"tap: listening on http://{host}:{runner.addresses[0][1]} -> {upstream}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()
    return tap.num_recorded
