"""Live layout switch monolithic -> intra -> cross -> monolithic while 100 requests stream:
none fails, each gets its exact token count, the history shows the initial layout plus the
three switches, and requests really ran in every layout."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from test_server_api import stream_completion

from gpuprobe.server.launch import start_server
from gpuprobe.store import Store

TOKEN = "switch-token-0b9e"
pytestmark = pytest.mark.timeout(300)


async def _scenario(url: str) -> tuple[list, list, list[dict]]:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    jobs, tasks, switches = [], [], []
    timeout = aiohttp.ClientTimeout(total=240)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        def launch(k: int) -> None:
            for _ in range(25):
                i = len(jobs)
                # 10-59 tokens: streams that outlast a switch, at half the tokens of 10-129
                jobs.append(([1 + i, 2, 3 + i % 50], 10 + (i * 37) % 50))
                tasks.append(asyncio.ensure_future(stream_completion(s, url, *jobs[-1])))

        for target in ("intra", "cross", "monolithic"):
            launch(25)
            await asyncio.sleep(0.5)
            async with s.post(url + "/admin/layout", headers=auth,
                              json={"layout": target, "prefill_share": 0.5}) as r:
                switches.append((r.status, await r.json()))
        launch(25)
        results = await asyncio.gather(*tasks)
        async with s.get(url + "/admin/layout", headers=auth) as r:
            layout = await r.json()
    return jobs, results, [switches, layout]


def test_switch_three_times_under_load(tmp_path):
    (tmp_path / "token").write_text(TOKEN)
    srv = start_server("tiny", "monolithic", store=str(tmp_path / "s.db"),
                       admin_token_file=str(tmp_path / "token"), log_path=str(tmp_path / "log"),
                       max_queue_wait="0")  # no 429 for a wait a busy machine predicts
    try:
        jobs, results, (switches, layout) = asyncio.run(_scenario(srv.url))
    finally:
        assert srv.stop() == 0
    assert [s[0] for s in switches] == [200, 200, 200], switches
    assert len(jobs) == 100
    for (_, n), r in zip(jobs, results):
        # the tiny model's random bytes: a chunk waits for the bytes that complete a character
        assert r["error"] is None and r["done"] and r["usage"] == n and 1 <= r["chunks"] <= n \
            and r["empty"] == 0, (n, r)
    history = layout["history"]
    assert [(h["from"], h["to"]) for h in history] == [
        (None, "monolithic"), ("monolithic", "intra"), ("intra", "cross"),
        ("cross", "monolithic")], history
    assert all(h["status"] == "ok" for h in history) and layout["layout"] == "monolithic"
    with Store.open(tmp_path / "s.db", read_only=True) as store:
        reqs, events = store.requests(source="server"), store.layout_events()
    assert len(reqs) == 100 and (reqs.status == "ok").all()
    assert set(reqs.layout) == {"monolithic", "intra", "cross"}
    split = reqs[reqs.layout != "monolithic"]
    assert (split.kv_handoff_bytes > 0).all() and (split.kv_handoff_s > 0).all()
    # cross's receive thread reports its CPU per request; intra receives inside the loop
    cross = reqs[reqs.layout == "cross"]
    assert (cross.kv_recv_cpu_s > 0).all() and (cross.kv_recv_cpu_s < 1.0).all()
    assert reqs[reqs.layout == "intra"].kv_recv_cpu_s.isna().all()
    assert list(events.to_layout) == ["monolithic", "intra", "cross", "monolithic"]
