"""Run the reference server until SIGTERM/SIGINT: build the front, start the first layout,
listen, then shut down gracefully (stop admitting, let in-flight requests finish for
`grace_s`, abort the rest, stop workers, flush telemetry)."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
import uuid

from aiohttp import web

from gpuprobe.server.app import ServerApp
from gpuprobe.server.front_model import freeze_startup_heap, load_front_model
from gpuprobe.server.metrics import ServerMetrics
from gpuprobe.server.options import LayoutConfig, ServeOptions
from gpuprobe.server.router import Router
from gpuprobe.server.telemetry import TelemetryWriter

log = logging.getLogger("gpuprobe.server")


async def serve(opts: ServeOptions, layout: LayoutConfig, host: str, port: int,
                store_path: str | None, admin_token: str | None, token_source: str,
                grace_s: float = 10.0) -> None:
    model = load_front_model(opts.model, opts.kv_cache_mb, opts.block_size, opts.device,
                             opts.model_overrides)
    freeze_startup_heap()  # no full collection walks the tokenizer while tokens stream
    run_id = f"serve-{uuid.uuid4().hex[:12]}"
    host_name = socket.gethostname()
    telemetry = TelemetryWriter(store_path, run_id, host_name, {
        "model": opts.model, "layout": layout.layout, "device": opts.device})
    metrics = ServerMetrics(opts.model, model.max_context)
    router = Router(opts, metrics, telemetry, run_id, host_name, model.max_context)
    runner = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await router.switch(layout, actor="startup", reason="initial layout")
        front = ServerApp(model, router, metrics, admin_token)
        runner = web.AppRunner(front.app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        url = f"http://{host}:{bound}"
        log.info("admin token: %s", token_source)
        print(f"gpuprobe serve: ready on {url} (model {opts.model}, layout {layout.layout}, "
              f"run {run_id}, OpenAI API at {url}/v1)", flush=True)
        await stop.wait()
        print("gpuprobe serve: shutting down", file=sys.stderr, flush=True)
    finally:
        await router.shutdown(grace_s)
        if runner is not None:
            await runner.cleanup()
        telemetry.close()
