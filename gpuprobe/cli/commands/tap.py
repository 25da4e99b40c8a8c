"""`gpuprobe tap`: a recording reverse proxy in front of an OpenAI-compatible server."""
from __future__ import annotations

NAME = "tap"
HELP = "proxy an OpenAI-compatible server and record each request's timing into the store"


def add_arguments(p) -> None:
    p.add_argument("--upstream", required=True, metavar="URL", help="the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--listen", default="127.0.0.1:9000", metavar="HOST:PORT",
                   help="where clients connect (default 127.0.0.1:9000; port 0 picks a free one)")
    p.add_argument("--flush-interval", type=float, default=1.0, metavar="S", help="seconds between store writes")


def run(args) -> int:
    import asyncio
    import time
    import uuid
    from urllib.parse import urlparse

    from gpuprobe.errors import UserError

    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--listen: {args.listen!r} is not HOST:PORT")
    url = urlparse(args.upstream)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise UserError(f"--upstream: {args.upstream!r} is not an http(s) URL")
    from gpuprobe.store import Store

    with Store.open(args.store, busy_timeout_s=0.5) as store:
        run_id = f"tap-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        store.start_run(run_id, "tap", meta={"upstream": args.upstream})
        try:
            num = asyncio.run(_serve(args.upstream, store, run_id, host, int(port), args.flush_interval))
        finally:
            store.end_run(run_id)
    print(f"tap: recorded {num} requests (run {run_id})", flush=True)
    return 0


async def _serve(upstream: str, store, run_id: str, host: str, port: int, flush_s: float) -> int:
    import asyncio
    import signal

    from aiohttp import web

    from gpuprobe.collectors.tap import Tap

    tap = Tap(upstream, store, run_id=run_id, flush_interval_s=flush_s, log=lambda m: print(m, flush=True))
    runner = web.AppRunner(tap.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]
    print(f"tap: listening on http://{host}:{bound} -> {upstream}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
    return tap.num_recorded
