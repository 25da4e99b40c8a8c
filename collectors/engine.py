"""Scrape an inference engine's /metrics (vLLM, SGLang, TGI, gpuprobe serve) into Sample rows.

    scraper = EngineScraper("http://127.0.0.1:8000/metrics")
    rows = await scraper.collect(time.time())   # source "engine", device = the URL

Gauges are stored as read, counters as rates and histograms as windowed p50/p90/p99/mean
(from bucket deltas between two scrapes, so the first scrape gives gauges only). Labels carry
"engine=<vllm|sglang|tgi|unknown>;model=<model>". Every attempt also stores `scrape_up` (1 or 0).
A target that is down, slow or answers garbage is logged once per change of state and retried
with exponential backoff; it never raises into the sampling loop.
"""
from __future__ import annotations

import asyncio
import socket
import time
from typing import Callable

import aiohttp
from gpuprobe.collectors import promtext

from gpuprobe.store import Sample

MAX_BACKOFF_S = 60.0


class EngineScraper:
    source = "engine"

    def __init__(self, url: str, host: str | None = None, timeout_s: float = 2.0,
                 log: Callable[[str], None] = print):
        self.url = url
        self.host = host or socket.gethostname()
        self.timeout_s = timeout_s
        self.log = log
        self.state = "new"  # "up", or why it is not: "down", "slow", "garbage", "http <code>"
        self.num_failures = 0
        self._retry_at_s = 0.0
        self._prev: tuple[float, promtext.Snapshot] | None = None
        self._session: aiohttp.ClientSession | None = None

    async def collect(self, now_s: float) -> list[Sample]:
        if time.monotonic() < self._retry_at_s:
            return []
        try:
            snap = promtext.parse(await self._fetch())
        except asyncio.TimeoutError:
            return self._failed(now_s, "slow", f"no answer within {self.timeout_s:g} s")
        except aiohttp.ClientResponseError as exc:
            return self._failed(now_s, f"http {exc.status}", exc.message)
        except (aiohttp.ClientError, OSError) as exc:
            return self._failed(now_s, "down", str(exc) or type(exc).__name__)
        except (ValueError, UnicodeDecodeError, KeyError, IndexError) as exc:
            return self._failed(now_s, "garbage", f"not Prometheus text ({exc})"[:200])
        self._set_state("up", "scraping")
        self.num_failures, self._retry_at_s = 0, 0.0
        prev, self._prev = self._prev, (now_s, snap)
        values = {k: v for k, v in snap.values.items() if snap.kinds.get(k[0]) == "gauge"}
        if prev is not None:
            values = promtext.window(prev[1], snap, now_s - prev[0])
        rows = [self._row(now_s, "scrape_up", 1.0, snap.engine, "")]
        rows += [self._row(now_s, metric, v, snap.engine, model) for (metric, model), v in values.items()]
        return rows

    def _row(self, now_s: float, metric: str, value: float | None, engine: str, model: str) -> Sample:
        labels = f"engine={engine};model={model}" if metric != "scrape_up" else ""
        return Sample(now_s, self.host, self.source, self.url, metric, value, labels)

    async def _fetch(self) -> str:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        async with self._session.get(self.url, raise_for_status=True) as resp:
            return await resp.text(errors="strict")

    def _failed(self, now_s: float, state: str, detail: str) -> list[Sample]:
        self._set_state(state, detail)
        self.num_failures += 1
        backoff = min(MAX_BACKOFF_S, 0.5 * 2 ** min(self.num_failures, 10))
        self._retry_at_s = time.monotonic() + backoff
        self._prev = None  # a window across an outage would mix two engine lifetimes
        return [self._row(now_s, "scrape_up", 0.0, "", "")]

    def _set_state(self, state: str, detail: str) -> None:
        if state != self.state:
            if state == "up" and self.state == "new":
                self.log(f"scrape {self.url}: up")
            else:
                self.log(f"scrape {self.url}: {state}: {detail}" + (
                    "" if state == "up" else " (retrying with backoff)"))
            self.state = state

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
