"""Overload: past max_num_seqs + max_queue requests in flight, the server answers 429 with
Retry-After, and keeps serving the admitted ones."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from gpuprobe.server.launch import start_server

pytestmark = pytest.mark.timeout(180)


async def _burst(url: str, n: int) -> list[tuple[int, str | None, int]]:
    # long enough that both admitted requests outlast the burst's arrivals on a busy machine
    body = {"prompt": [1, 2, 3], "max_tokens": 1500, "ignore_eos": True}

    async def one(s):
        async with s.post(url + "/v1/completions", json=body) as r:
            data = await r.json()
            tokens = data["usage"]["completion_tokens"] if r.status == 200 else -1
            return r.status, r.headers.get("Retry-After"), tokens

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as s:
        return await asyncio.gather(*(one(s) for _ in range(n)))


def test_overload_answers_429_with_retry_after(tmp_path):
    srv = start_server("tiny", "monolithic", store=str(tmp_path / "s.db"), max_num_seqs=1,
                       max_queue=1)
    try:
        results = asyncio.run(_burst(srv.url, 8))
    finally:
        assert srv.stop() == 0
    statuses = [r[0] for r in results]
    assert statuses.count(200) == 2 and statuses.count(429) == 6, statuses
    assert all(r[1] is not None and int(r[1]) >= 1 for r in results if r[0] == 429)
    assert all(r[2] == 1500 for r in results if r[0] == 200)
