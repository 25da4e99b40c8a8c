"""A standalone worker's /metrics: its link's connections, accepted by kind and refused or
cut by reason (link_server.REASONS), read from LinkCounters at scrape time."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class _LinkCollector:
    def __init__(self, counters, info: dict):
        self.counters, self.info = counters, info

    def collect(self):
        c = self.counters
        accepted = CounterMetricFamily("gpuprobe_link_accepted", "Authenticated link "
                                       "connections, by kind", labels=["kind"])
        for kind in ("control", "kv"):
            accepted.add_metric([kind], c.accepted.get(kind, 0))
        refused = CounterMetricFamily("gpuprobe_link_refused", "Link connections refused or "
                                      "closed for a bad frame, by reason", labels=["reason"])
        for reason, n in sorted(c.refused.items()):
            refused.add_metric([reason], n)
        yield accepted
        yield refused
        yield GaugeMetricFamily("gpuprobe_link_open_connections", "Link connections open now",
                                value=c.open)
        info = GaugeMetricFamily("gpuprobe_worker_info", "This worker's role and model",
                                 labels=["role", "model", "worker"])
        info.add_metric([self.info["role"], self.info["model"], self.info["worker"]], 1)
        yield info


def serve_metrics(counters, info: dict, host: str, port: int) -> int:
    """Serve /metrics on host:port (0: any free port) in a thread; returns the port."""
    registry = CollectorRegistry()
    registry.register(_LinkCollector(counters, info))
    server, _ = start_http_server(port, host, registry)
    return server.server_port
