"""`gpuprobe dashboard`: the Streamlit app over a store, bound to 127.0.0.1 unless told."""
from __future__ import annotations

from gpuprobe.argtypes import port

NAME = "dashboard"
HELP = "serve the dashboard (Streamlit) over a store: counters, mix, model, forecast, recommendation"


def add_arguments(p) -> None:
    p.add_argument("--port", type=port, default=8501, help="port (default 8501)")
    p.add_argument("--source", metavar="prometheus=URL",
                   help="also read a fleet through this Prometheus (the Fleet page); the other pages "
                        "read the store")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; 0.0.0.0 exposes the Apply button to the network)")


def command(store_path: str, host: str, port_: int) -> list[str]:
    """The `streamlit run` command line: headless, always with --server.address."""
    import sys
    from pathlib import Path

    import gpuprobe.dashboard
    app = Path(gpuprobe.dashboard.__file__).parent / "app.py"
    return [sys.executable, "-m", "streamlit", "run", str(app), "--server.address", host,
            "--server.port", str(port_), "--server.headless", "true",
            "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
            "--client.toolbarMode", "viewer"]


def run(args) -> int:
    import os
    import signal
    import subprocess

    from gpuprobe.errors import StoreError, UserError
    from gpuprobe.store import Store
    from gpuprobe.store.connection import resolve_path

    path = resolve_path(args.store).resolve()
    try:  # opened for writing once, so an older store is migrated before the app reads it read-only
        Store.open(path, create=False).close()
    except StoreError as exc:
        raise UserError(f"--store: {exc} (make one with `gpuprobe demo` or `gpuprobe import`)") from None
    env = {**os.environ, "GPUPROBE_STORE": str(path)}
    if args.source:
        from gpuprobe.sources import parse_source
        parse_source(args.source)  # a wrong spec is one line here, not an error page
        env["GPUPROBE_SOURCE"] = args.source
    print(f"gpuprobe dashboard: store {path}; open http://{args.host}:{args.port}", flush=True)
    proc = subprocess.Popen(command(str(path), args.host, args.port), env=env)
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())  # a stopped command stops its app
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait(10)
        return 130
