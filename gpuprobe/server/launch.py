"""Start a reference server in a subprocess and wait until it answers /health.

    with start_server("tiny", "monolithic", store="run.db") as srv:
        requests.post(srv.url + "/v1/completions", ...)

Used by tests, benches and `gpuprobe validate`. start_worker does the same for a
`gpuprobe worker` (the cross layout's remote workers) and waits for its ready line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass

from gpuprobe.errors import GpuprobeError
from gpuprobe.server.kv_transfer import free_port


@dataclass
class ServerHandle:
    url: str  # http://host:port, without /v1
    proc: subprocess.Popen
    log_path: str | None = None

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM (graceful: telemetry is flushed), then SIGKILL after timeout_s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _die_with_parent() -> None:
    """Linux: the server gets SIGTERM when the thread that launched it dies, so a killed
    `gpuprobe validate` or test run leaves no orphan server holding cores."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def start_server(model: str = "tiny", layout: str = "monolithic", port: int | None = None,
                 store: str | None = None, host: str = "127.0.0.1", log_path: str | None = None,
                 env: dict | None = None, timeout_s: float = 180.0, **opts) -> ServerHandle:
    """Run `gpuprobe serve` with opts as flags (prefill_share=0.5 -> --prefill-share 0.5).

    Server output goes to log_path (default: discarded). Raises GpuprobeError if the server
    exits or is not healthy within timeout_s.
    """
    port = port or free_port(host)
    cmd = [sys.executable, "-m", "gpuprobe.cli.main", "serve", "--model", model, "--layout",
           layout, "--host", host, "--port", str(port)]
    if store:
        cmd += ["--store", str(store)]
    for key, value in opts.items():
        if value is not None:
            cmd += [_flag(key), str(value)]
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if log_path else out,
                            env={**os.environ, **(env or {})}, start_new_session=True,
                            preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    if log_path:
        out.close()  # the child holds its own copy
    handle = ServerHandle(f"http://{host}:{port}", proc, log_path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise GpuprobeError(f"server exited with code {proc.returncode} before ready"
                                + _log_says(log_path))
        if _healthy(handle.url):
            return handle
        time.sleep(0.2)
    handle.stop(5)
    raise GpuprobeError(f"server not healthy after {timeout_s:.0f}s" + _log_says(log_path))


def _log_says(log_path: str | None, lines: int = 3) -> str:
    """'; its log PATH ends: ...' with the log's last non-empty lines, for a one-line error."""
    if not log_path:
        return ""
    try:
        with open(log_path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            text = fh.read().decode(errors="replace")
    except OSError as exc:
        return f"; its log {log_path} cannot be read: {exc.strerror}"
    tail = " | ".join([x.strip() for x in text.splitlines() if x.strip()][-lines:])
    return f"; its log {log_path} ends: {tail or '(empty)'}"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200 and json.load(r).get("status") == "ok"
    except (OSError, ValueError):
        return False


@dataclass
class WorkerProcessHandle:
    """A `gpuprobe worker` process. addr (its link) and metrics_url (its /metrics; None with
    --no-metrics) are known once wait_ready() has read its ready line."""

    proc: subprocess.Popen
    log_path: str
    log_start: int = 0  # where this run's output starts in log_path
    addr: str | None = None
    metrics_url: str | None = None

    def wait_ready(self, timeout_s: float = 180.0) -> WorkerProcessHandle:
        """Wait for the ready line. Raises GpuprobeError if the worker exits first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(self.log_path, "rb") as fh:
                fh.seek(self.log_start)
                m = _READY.search(fh.read().decode(errors="replace"))
            if m:
                self.addr, self.metrics_url = m.group(1), m.group(2)
                return self
            if self.proc.poll() is not None:
                raise GpuprobeError(f"worker exited with code {self.proc.returncode} before "
                                    f"ready" + _log_says(self.log_path))
            time.sleep(0.1)
        self.stop(5)
        raise GpuprobeError(f"worker not ready after {timeout_s:.0f}s" + _log_says(self.log_path))

    def stop(self, timeout_s: float = 30.0) -> int:
        return ServerHandle("", self.proc).stop(timeout_s)


_READY = re.compile(r"gpuprobe worker: ready, .* on link (\S+?)(?: over TLS)?(?:, /metrics at "
                    r"(\S+))?$", re.M)


def start_worker(role: str, listen: str, secret_file: str, log_path: str,
                 model: str = "tiny", wait: bool = True, wrap: tuple[str, ...] = (),
                 **opts) -> WorkerProcessHandle:
    """Run `gpuprobe worker --role ROLE --listen LISTEN ...` (opts as flags, True for a bare
    flag); with wait, until its ready line. wrap: a command that execs it (`ip netns exec NS`).
    Like start_server, the worker gets SIGTERM when the thread that started it ends: start
    several from one thread (wait=False), then wait_ready."""
    cmd = [*wrap, sys.executable, "-m", "gpuprobe.cli.main", "worker", "--role", role,
           "--listen", listen, "--link-secret-file", str(secret_file), "--model", model]
    for key, value in opts.items():
        if value is True:
            cmd.append(_flag(key))
        elif value is not None and value is not False:
            cmd += [_flag(key), str(value)]
    with open(log_path, "ab") as out:
        start = out.tell()  # a restarted worker's log still holds the last ready line
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    handle = WorkerProcessHandle(proc, log_path, start)
    return handle.wait_ready() if wait else handle
