"""Where counters come from: the embedded store (default) or a Prometheus-compatible server.

    src = open_source("prometheus=http://prom:9090")   # a PrometheusSource
    since, until = time_range("1h", "now")              # epoch seconds

Both offer downsample(), samples(), series() and metrics() with the same DataFrame columns,
so a reader does not know which it has.
"""
from __future__ import annotations

import time
from datetime import datetime
from urllib.parse import urlparse

from gpuprobe.errors import UserError
from gpuprobe.units import parse_duration

KINDS = ("prometheus",)


def parse_source(text: str) -> tuple[str, str]:
    """'prometheus=http://host:9090' -> ('prometheus', 'http://host:9090')."""
    kind, sep, url = str(text).partition("=")
    if not sep or kind not in KINDS:
        raise UserError(f"--source: {text!r}: expected prometheus=http://HOST:PORT")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise UserError(f"--source: {url!r} is not an http(s) URL (e.g. prometheus=http://127.0.0.1:9090)")
    return kind, url


def open_source(text: str, timeout_s: float = 10.0):
    from gpuprobe.sources.prometheus import PrometheusSource
    _, url = parse_source(text)
    return PrometheusSource(url, timeout_s=timeout_s)


def parse_time(text: str, now_s: float, what: str) -> float:
    """'now', a duration ago ('15m', '2h'), epoch seconds, or an ISO time ('2026-12-05T08:00:00')."""
    raw = str(text).strip()
    if raw == "now":
        return now_s
    try:
        value = float(raw)
        if value > 1e9:  # epoch seconds, not a bare duration
            return value
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(raw).timestamp()
    except ValueError:
        pass
    try:
        return now_s - parse_duration(raw, what)
    except UserError:
        raise UserError(f"{what}: {text!r}: give 'now', a duration ago (15m, 2h), epoch seconds "
                        f"or an ISO time") from None


def time_range(since: str, until: str, now_s: float | None = None) -> tuple[float, float]:
    now_s = time.time() if now_s is None else now_s
    start, end = parse_time(since, now_s, "--since"), parse_time(until, now_s, "--until")
    if end <= start:
        raise UserError(f"--since/--until: the range is empty ({since} .. {until})")
    return start, end
