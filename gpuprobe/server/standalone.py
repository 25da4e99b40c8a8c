"""`gpuprobe worker`: one prefill or decode worker as a process of its own, on any host.

It loads the model, then listens on one link port (link_server) for the front's control
connection and, on a decode worker, for prefill workers' KV; every connection proves the
shared secret first. It serves fronts one after another until SIGTERM: a front that leaves
aborts what it sent, never the worker. Runs in the worker's own process (imports torch).
"""

from __future__ import annotations

import logging
import os
import signal
import sys

from gpuprobe.errors import GpuprobeError
from gpuprobe.server.link_server import LinkCounters, LinkServer
from gpuprobe.server.worker_control import ControlChannel
from gpuprobe.server.worker_metrics import serve_metrics

log = logging.getLogger("gpuprobe.worker")


def run_worker(spec, listen: str, link, metrics: tuple[str, int] | None,
               max_connections: int) -> None:
    """Load, listen, print one ready line, then run the engine loop until SIGTERM."""
    from gpuprobe.server.worker_loop import WorkerLoop

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    control = ControlChannel()
    loop = WorkerLoop(spec, control, None)
    control.limits = loop.limits
    counters = LinkCounters()
    handlers = {"control": control.serve}
    if spec.role == "decode":
        handlers["kv"] = loop.handoff.serve
    try:
        server = LinkServer(listen, link, handlers, counters, max_connections).start()
    except OSError as exc:
        raise GpuprobeError(f"--listen {listen}: cannot listen ({exc.strerror or exc})") from None
    if spec.role == "decode":
        loop.handoff.address = server.address
    where = ""
    if metrics is not None:
        try:
            port = serve_metrics(counters, {"role": spec.role, "model": spec.model,
                                            "worker": spec.worker_id}, *metrics)
        except OSError as exc:
            server.close()
            raise GpuprobeError(f"--metrics-port {metrics[1]} on {metrics[0]}: cannot listen "
                                f"({exc.strerror or exc})") from None
        where = f", /metrics at http://{metrics[0]}:{port}/metrics"
    tls = " over TLS" if link.cert else ""
    print(f"gpuprobe worker: ready, {spec.role} of {spec.model} on link {server.address}{tls}"
          f"{where}", flush=True)
    try:
        loop.run()
    except SystemExit:
        pass
    finally:
        server.close()
    # Exit without the interpreter's teardown: its last garbage collection of the model's
    # objects took 3.5 s after SIGTERM, and nothing is left to write but the logs.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
