"""The sidecar agent: one drift-free loop per source, batched writes, its own /metrics.

    agent = Agent(cfg, store_path)          # nvml=/psutil= take fakes in tests and the bench
    stats = asyncio.run(agent.run())        # until cfg.duration, SIGTERM or agent.stop()

Samplers append to a bounded RowBuffer (gpuprobe.store.buffer); a flush loop writes it every
flush_interval in a worker thread, so a slow or locked store never stalls sampling. SIGTERM flushes and returns;
SIGKILL loses at most what was sampled since the last flush.
"""
from __future__ import annotations

import asyncio
import signal
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from gpuprobe.collectors.config import AgentConfig
from gpuprobe.collectors.engine import EngineScraper
from gpuprobe.collectors.exporter import LatestValues, serve
from gpuprobe.collectors.gpm import GpmCollector
from gpuprobe.collectors.gpu import GpuCollector
from gpuprobe.collectors.gpu_procs import GpuProcessCollector
from gpuprobe.collectors.host import HostCollector
from gpuprobe.collectors.loop import every

from gpuprobe.errors import StoreError, UserError
from gpuprobe.store import Store
from gpuprobe.store.buffer import RowBuffer


@dataclass(frozen=True)
class AgentStats:
    num_produced: int
    num_written: int
    num_dropped: int
    num_buffered: int
    metrics_port: int | None


class Agent:
    def __init__(self, cfg: AgentConfig, store: Store, nvml: Any = None, psutil: Any = None,
                 log: Callable[[str], None] = print, host: str | None = None):
        self.cfg, self.store, self.log = cfg, store, log
        self.host = host or socket.gethostname()
        self.buffer = RowBuffer(cfg.max_buffer_samples)
        self.events: list[dict] = []
        self.latest = LatestValues()
        self.metrics_port: int | None = None
        self._stop = asyncio.Event()
        self._nvml, self._psutil = nvml, psutil
        self._errors: dict[str, str] = {}
        self._num_dropped_reported = 0
        self._drop_event: dict | None = None

    def stop(self) -> None:
        self._stop.set()

    def counters(self) -> dict[str, float]:
        return {"gpuprobe_agent_samples_total": self.buffer.num_produced,
                "gpuprobe_agent_written_samples_total": self.buffer.num_written,
                "gpuprobe_agent_dropped_samples_total": self.buffer.num_dropped,
                "gpuprobe_agent_buffered_samples": len(self.buffer)}

    def _sources(self) -> list[tuple[str, float, Any]]:
        iv, out = self.cfg.intervals, []
        if iv.nvml or iv.gpm or iv.proc:
            gpu = GpuCollector(self._nvml, self.host)
            if gpu.off_reason:
                self.log(gpu.off_reason)
            else:
                out += [("nvml", iv.nvml, gpu), ("gpm", iv.gpm, GpmCollector(gpus=gpu.gpus)),
                        ("gpu_proc", iv.proc, GpuProcessCollector(gpus=gpu.gpus))]
        out.append(("host", iv.host, HostCollector(self._psutil, self.host, self.cfg.pids,
                                                   self.cfg.process_pattern)))
        out += [(f"scrape {u}", iv.scrape, EngineScraper(u, self.host, timeout_s=min(5.0, max(0.5, iv.scrape)),
                                                         log=self.log)) for u in self.cfg.scrape]
        return [s for s in out if s[1] > 0]

    def _tick(self, collector: Any) -> Callable:
        def take(rows) -> None:
            self.buffer.add(rows)
            self.latest.update(rows)
            drain = getattr(collector, "drain_events", None)
            if drain is not None:
                for event in drain():
                    self.events.append(event)
                    self.log(f"event: {event['kind']}: {event['message']}")

        if asyncio.iscoroutinefunction(collector.collect):
            async def tick_async() -> None:
                take(await collector.collect(time.time()))
            return tick_async
        return lambda: take(collector.collect(time.time()))

    def _on_error(self, name: str) -> Callable[[BaseException], None]:
        def report(exc: BaseException) -> None:
            text = f"{type(exc).__name__}: {exc}"
            if self._errors.get(name) != text:  # once per change, not once per tick
                self._errors[name] = text
                self.log(f"source {name}: {text}")
        return report

    def _note_drops(self) -> None:
        """Samples dropped since the last stored event become an event, so the dashboard can
        raise the alert (the /metrics counter alone is gone with the agent). While the store
        refuses writes, the one pending event grows instead of a new one per flush."""
        new = self.buffer.num_dropped - self._num_dropped_reported
        if new <= 0:
            return
        pending = next((e for e in self.events if e is self._drop_event), None)
        if pending is not None:
            new += int(pending["message"].split()[1])  # "dropped N samples, ..."
            self.events.remove(pending)
        self._num_dropped_reported = self.buffer.num_dropped
        why = f" ({self.buffer.last_error})" if self.buffer.last_error else ""
        self._drop_event = {"ts_s": time.time(), "host": self.host, "source": "agent", "device": "",
                            "kind": "samples_dropped",
                            "message": f"dropped {new} samples, buffer full at {self.buffer.max_rows}{why}"}
        self.events.append(self._drop_event)

    async def flush(self) -> int:
        self._note_drops()
        rows, events = self.buffer.take(), self.events
        self.events = []
        if not rows and not events:
            return 0
        write = asyncio.ensure_future(asyncio.to_thread(self._write, rows, events))
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:
            # Shutting down mid-write: the thread goes on regardless, so wait and count it.
            await asyncio.wait([write])
            self._account(write, rows, events)
            raise
        except Exception:
            pass  # looked at in _account
        return self._account(write, rows, events)

    def _account(self, write: asyncio.Future, rows: list, events: list[dict]) -> int:
        exc = write.exception()
        if isinstance(exc, StoreError):
            if self.buffer.last_error is None:
                self.log(f"store: {exc}; keeping up to {self.buffer.max_rows} samples in memory")
            self.buffer.refused(rows, exc)
            self.events = events + self.events
            return 0
        if exc is not None:
            self.buffer.refused(rows, exc)
            raise exc
        if self.buffer.last_error is not None:
            self.log("store: writable again")
        self.buffer.written(len(rows))
        return len(rows)

    def _write(self, rows: list, events: list[dict]) -> None:
        self.store.insert_samples(rows)
        if events:
            self.store.insert_events(events)

    async def run(self) -> AgentStats:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.stop)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread (tests): stop() still works
        server = None
        if self.cfg.metrics_port is not None:
            try:
                server, self.metrics_port = serve(self.latest, self.counters, self.cfg.metrics_port,
                                                  self.cfg.listen)
            except OSError as exc:  # the port is taken, or the address is not this host's
                where = f"{self.cfg.listen}:{self.cfg.metrics_port}"
                raise UserError(f"/metrics: cannot listen on {where} ({exc.strerror or exc}; "
                                f"see --metrics-port, --listen, --no-metrics)") from None
            self.log(f"serving /metrics on http://{self.cfg.listen}:{self.metrics_port}/metrics")
        sources = self._sources()
        tasks = [asyncio.create_task(every(iv, self._tick(c), on_error=self._on_error(n)))
                 for n, iv, c in sources]
        tasks.append(asyncio.create_task(every(self.cfg.flush_interval, self.flush, on_error=self._on_error("flush"))))
        self.log("sampling: " + ", ".join(f"{n} every {iv:g} s" for n, iv, _ in sources))
        try:
            await asyncio.wait_for(self._stop.wait(), self.cfg.duration or None)
        except asyncio.TimeoutError:
            pass
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.flush()
            for _, _, c in sources:
                closer = getattr(c, "close", None)
                if closer is not None:
                    result = closer()
                    if asyncio.iscoroutine(result):
                        await result
            if server is not None:
                server.shutdown()
        return AgentStats(self.buffer.num_produced, self.buffer.num_written, self.buffer.num_dropped,
                          len(self.buffer), self.metrics_port)


def new_run_id() -> str:
    return f"agent-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
