"""Cross across processes: a front and two prefill and two decode `gpuprobe worker`s, five
processes each started by its own command (none a child of another), each bound to its own
loopback address (Linux routes all of 127/8 to lo); where the test may make a network
namespace (root, iproute2), the second decode worker runs in one of its own, reached over a
veth pair, as another host would be. One set serves every test here, in order:
a live switch from monolithic to the remote 2P2D and back with exact tokens on every worker;
the measured KV transfer (store, /metrics, profile); `gpuprobe apply` of a 2P2D
recommendation and back, under load; what the admin API refuses; 1,000 hostile connections
to a worker; a decode worker killed under load, and its return."""
from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import aiohttp
import pytest

from link_fuzz import EXPECTED, KV_BYTES_PER_TOKEN, hostile
from netns import delete_netns, make_netns
from sse_read import sse_objects

from gpuprobe.cli.main import main
from gpuprobe.server import kv_transfer as K
from gpuprobe.server.launch import start_server, start_worker
from gpuprobe.store import Store

pytestmark = pytest.mark.timeout(400)
TOKEN = "xhost-admin-token-5c1d"
IPS = {"p1": "127.0.0.2", "p2": "127.0.0.3", "d1": "127.0.0.4", "d2": "127.0.0.5"}


@dataclass
class Cluster:
    url: str
    store: str
    secret: bytes
    workers: dict
    logs: object
    netns: tuple | None = None  # (name, host-side address, d2's address) when d2 runs in one
    front: object = None
    reference: dict = field(default_factory=dict)  # prompt index -> monolithic token ids

    def wid(self, name: str) -> str:
        role = "prefill" if name.startswith("p") else "decode"
        return f"{role}@{self.workers[name].addr}"


def _cores(name: str) -> tuple:
    cores = sorted(os.sched_getaffinity(0))
    return () if len(cores) < 2 else (cores[0],) if name.endswith("1") else (cores[1],)


def _start(name: str, d, listen: str | None = None, wait: bool = True, netns=None):
    role = "prefill" if name.startswith("p") else "decode"
    cores = _cores(name)
    ip = netns[2] if netns else IPS[name]
    return start_worker(role, listen or f"{ip}:0", str(d / "secret"),
                        str(d / f"{name}.log"), wait=wait, metrics_port=0,
                        wrap=("ip", "netns", "exec", netns[0]) if netns else (),
                        cores=",".join(map(str, cores)) if cores else None)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("xhost")
    secret = secrets.token_hex(32).encode()
    (d / "secret").write_bytes(secret)
    (d / "token").write_text(TOKEN)
    c = Cluster("", str(d / "front.db"), secret, {}, d, netns=make_netns())
    try:
        # each imports torch: start all four, then wait (from this thread: they die with it)
        workers = c.workers
        for n in IPS:
            workers[n] = _start(n, d, wait=False, netns=c.netns if n == "d2" else None)
        for w in workers.values():
            w.wait_ready()
        c.front = start_server(
            "tiny", "monolithic", store=c.store, log_path=str(d / "front.log"),
            admin_token_file=str(d / "token"), link_secret_file=str(d / "secret"),
            prefill_workers=f"{workers['p1'].addr},{workers['p2'].addr}",
            decode_workers=f"{workers['d1'].addr},{workers['d2'].addr}", max_queue_wait="0")
        c.url = c.front.url
        yield c
    finally:
        if c.front is not None:
            assert c.front.stop() == 0
        for w in c.workers.values():
            w.stop()
        if c.netns:
            delete_netns(c.netns[0])


def _prompt(i: int) -> tuple[list[int], int]:
    return [(7 * i + 13 * j) % 250 + 1 for j in range(3 + i % 37)], 8 + (i * 11) % 40


async def _stream(s, url: str, prompt, max_tokens: int) -> dict:
    """A streamed completion with return_token_ids: its token ids, and an error event if any."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
            "temperature": 0, "return_token_ids": True}
    out = {"ids": [], "error": None, "rid": None}
    async with s.post(url + "/v1/completions", json=body) as r:
        assert r.status == 200, await r.text()
        async for obj in sse_objects(r):
            if "error" in obj:
                out["error"] = obj["error"]
                continue
            out["rid"] = obj["id"]
            out["ids"] += obj["choices"][0]["token_ids"]
    return out


async def _admin(s, url: str, body: dict | None = None) -> dict:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    if body is None:
        async with s.get(url + "/admin/layout", headers=auth) as r:
            return await r.json()
    async with s.post(url + "/admin/layout", headers=auth, json=body) as r:
        assert r.status == 200, await r.text()
        return await r.json()


def _run(coro):
    return asyncio.run(coro)


def _session():
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300))


def _wait(cond, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"not met in {timeout_s:.0f}s: {what}"
        time.sleep(0.1)


def _rows(c: Cluster):
    with Store.open(c.store, read_only=True) as st:
        return st.requests(source="server")


def _steps_by_worker(c: Cluster, since_s: float = 0.0) -> Counter:
    with Store.open(c.store, read_only=True) as st:
        steps = st.steps()
    return Counter(steps[steps.start_s > since_s].worker)


def _ensure(c: Cluster, workers: str) -> None:
    async def go():
        async with _session() as s:
            now = await _admin(s, c.url)
            if now["workers"] != workers:
                await _admin(s, c.url, {"layout": "cross" if workers == "remote"
                                        else "monolithic"})
    _run(go())


def test_live_switch_to_remote_2p2d_and_back_is_exact_and_uses_every_worker(cluster):
    c = cluster

    async def go():
        async with _session() as s:
            ref = await asyncio.gather(*(_stream(s, c.url, *_prompt(i)) for i in range(60)))
            c.reference.update({i: r["ids"] for i, r in enumerate(ref)})
            during = [asyncio.ensure_future(_stream(s, c.url, *_prompt(i))) for i in range(30)]
            await asyncio.sleep(0.3)
            to_remote = await _admin(s, c.url, {"layout": "cross", "actor": "test"})
            remote = await asyncio.gather(*(_stream(s, c.url, *_prompt(i)) for i in range(60)))
            back = [asyncio.ensure_future(_stream(s, c.url, *_prompt(i))) for i in range(30, 60)]
            await asyncio.sleep(0.3)
            to_mono = await _admin(s, c.url, {"layout": "monolithic"})
            state = await _admin(s, c.url)
            return ref, await asyncio.gather(*during), to_remote, remote, \
                await asyncio.gather(*back), to_mono, state

    t0 = time.time()
    ref, during, to_remote, remote, back, to_mono, state = _run(go())
    assert all(r["error"] is None and len(r["ids"]) == _prompt(i)[1] for i, r in enumerate(ref))
    for i, r in list(enumerate(during)) + list(enumerate(remote)) + \
            [(30 + i, r) for i, r in enumerate(back)]:
        assert r["error"] is None and r["ids"] == c.reference[i], (i, r)
    assert to_remote["status"] == "ok" and to_mono["status"] == "ok"
    if c.netns:  # d2 is in a namespace of its own, reached over the veth pair
        assert c.workers["d2"].addr.startswith(c.netns[2] + ":")
    assert state["layout"] == "monolithic" and state["history"][-2]["to"] == "cross"
    _wait(lambda: len(_rows(c)) == 180, "all 180 request rows stored")
    rows = _rows(c).set_index("request_id")
    assert set(rows.loc[[r["rid"] for r in remote], "layout"]) == {"cross"}
    assert (rows.status == "ok").all()
    names = [c.wid(n) for n in IPS]
    _wait(lambda: all(_steps_by_worker(c, t0)[w] > 0 for w in names), "steps from every worker")


def test_each_kv_transfer_is_stored_exported_and_fits_the_link(cluster):
    c = cluster
    with Store.open(c.store, read_only=True) as st:
        rows = st.requests(source="server")
        run_id = rows.run_id.iloc[0]
        from gpuprobe.perf.profile import from_store

        profile = from_store(st, run_id)
    cross = rows[rows.layout == "cross"]
    assert len(cross) >= 60 and (cross.kv_xfer_s > 0).all() and (cross.kv_xfer_s < 5).all()
    assert (cross.kv_handoff_bytes == cross.prompt_tokens * KV_BYTES_PER_TOKEN).all()
    assert rows[rows.layout == "monolithic"].kv_xfer_s.isna().all()
    text = _metrics(c.url)
    assert text["vllm:nixl_bytes_transferred_count"] == len(cross)
    assert text["vllm:nixl_bytes_transferred_sum"] == cross.kv_handoff_bytes.sum()
    assert text["vllm:nixl_xfer_time_seconds_count"] == len(cross)
    assert abs(text["vllm:nixl_xfer_time_seconds_sum"] - cross.kv_xfer_s.sum()) < 1e-3
    assert profile.links["cross"].source == "measured"
    assert profile.kv_bytes_per_token == KV_BYTES_PER_TOKEN


def _metrics(url: str) -> dict:
    import urllib.request

    target = url if url.endswith("/metrics") else url + "/metrics"
    with urllib.request.urlopen(target, timeout=10) as r:
        lines = r.read().decode().splitlines()
    out = {}
    for line in lines:
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name.split("{")[0] if "model_name" in name else name] = float(value)
    return out


def test_apply_moves_the_front_onto_its_remote_2p2d_and_back_under_load(cluster):
    c = cluster
    _ensure(c, "local")
    db = str(c.logs / "recs.db")
    with Store.open(db) as st:
        recs = [st.insert_recommendation({
            "workload": "xhost", "layout": layout, "params": params, "profile": "tiny-cpu",
            "slo": {"ttft_s": 2.0, "tbt_s": 0.2}, "candidates": [], "reasons": []})
            for layout, params in (("cross", {"num_prefill": 2, "num_decode": 2}),
                                   ("monolithic", {}))]

    def apply(rec_id: int) -> int:
        return main(["apply", "--recommendation", str(rec_id), "--target", c.url,
                     "--admin-token-file", str(c.logs / "token"), "--store", db])

    async def go():
        async with _session() as s:
            out = []
            for rec_id in recs:  # each switch with 16 streams in flight
                load = [asyncio.ensure_future(_stream(s, c.url, *_prompt(i))) for i in range(16)]
                await asyncio.sleep(0.2)
                code = await asyncio.to_thread(apply, rec_id)
                out.append((code, await _admin(s, c.url), await asyncio.gather(*load)))
            return out

    (c1, on_remote, load1), (c2, back, load2) = _run(go())
    assert (c1, on_remote["layout"], on_remote["workers"]) == (0, "cross", "remote")
    assert (on_remote["num_prefill"], on_remote["num_decode"]) == (2, 2)
    assert (c2, back["layout"], back["workers"]) == (0, "monolithic", "local")
    assert [h["actor"] for h in back["history"][-2:]] == ["gpuprobe-apply"] * 2
    for i, r in list(enumerate(load1)) + list(enumerate(load2)):
        assert r["error"] is None and r["ids"] == c.reference[i], (i, r)


def test_admin_names_what_it_cannot_switch_to(cluster):
    c = cluster
    _ensure(c, "remote")

    async def go():
        out = []
        async with _session() as s:
            for body in ({"layout": "cross", "num_prefill": 3}, {"layout": "cross",
                         "workers": "elsewhere"}, {"layout": "intra", "workers": "remote"},
                         {"layout": "cross", "num_decode": 1}):
                async with s.post(c.url + "/admin/layout", json=body,
                                  headers={"Authorization": f"Bearer {TOKEN}"}) as r:
                    out.append((r.status, (await r.json())["error"]))
            return out, await _admin(s, c.url)

    answers, state = _run(go())
    assert [(st, e.get("param")) for st, e in answers] == [
        (400, "num_prefill"), (400, "workers"), (400, "remote"), (409, None)]
    assert "the front was given 2" in answers[0][1]["message"]
    assert "already runs on its remote workers" in answers[3][1]["message"]
    assert (state["workers"], state["num_prefill"], state["num_decode"]) == ("remote", 2, 2)


# ---- 1,000 hostile connections -------------------------------------------------------------
def _refused(w) -> Counter:
    m = _metrics(w.metrics_url)
    return Counter({k.split('"')[1]: v for k, v in m.items()
                    if k.startswith("gpuprobe_link_refused_total")})


def test_a_worker_serves_on_through_1000_hostile_connections(cluster):
    c = cluster
    _ensure(c, "remote")
    w = c.workers["d2"]
    pid, before = w.proc.pid, _refused(w)
    kinds = [list(EXPECTED)[i % len(EXPECTED)] for i in range(1000)]
    addr = K.parse_addr(w.addr)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda ik: hostile(ik[1], addr, c.secret, random.Random(ik[0])),
                      enumerate(kinds)))
    want = Counter(EXPECTED[k] for k in kinds)
    _wait(lambda: _refused(w) - before == want, f"refusals {dict(want)} counted", 120)
    assert w.proc.poll() is None and w.proc.pid == pid  # no crash
    # no restart: the front never lost its control connection to d2
    assert f"worker {c.wid('d2')} lost" not in open(c.logs / "front.log").read()
    log = open(w.log_path).read()
    peer = c.netns[1] if c.netns else "127.0.0.1"  # d2 sees the host end of its veth
    assert log.count(f"closed connection from {peer}:") >= 1000 and "(bad_proof)" in log
    t1 = time.time()

    async def serve_on():
        async with _session() as s:
            return await asyncio.gather(*(_stream(s, c.url, *_prompt(i)) for i in range(8)))

    for i, r in enumerate(_run(serve_on())):
        assert r["error"] is None and r["ids"] == c.reference[i]
    _wait(lambda: _steps_by_worker(c, t1)[c.wid("d2")] > 0, "d2 decodes after the fuzz")


# ---- a decode worker killed under load -------------------------------------------------------
def test_a_killed_decode_worker_fails_only_its_requests_and_rejoins(cluster):
    c = cluster
    _ensure(c, "remote")
    d1 = c.workers["d1"]
    jobs = [([(5 * i + j) % 200 + 1 for j in range(12)], 300) for i in range(40)]

    async def load():
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with _session() as s:
            tasks = [asyncio.ensure_future(_stream(s, c.url, p, n)) for p, n in jobs]
            deadline = time.monotonic() + 120
            while True:  # until d1 decodes requests that streamed (the front's count, not a guess)
                async with s.get(c.url + "/admin/workers", headers=auth) as r:
                    ws = (await r.json())["workers"]
                if sum(w["streaming"] for w in ws if w["worker"] == c.wid("d1")) >= 2:
                    break
                assert time.monotonic() < deadline, f"d1 never held streaming requests: {ws}"
                await asyncio.sleep(0.02)
            os.kill(d1.proc.pid, signal.SIGKILL)
            d1.proc.wait()
            return await asyncio.gather(*tasks)

    results = _run(load())
    failed = [r for r in results if r["error"] is not None]
    assert failed, "the killed worker held none of the requests"
    for r in failed:  # 503 lost worker; 500 when the prefill worker's send failed first
        assert r["error"]["code"] in (500, 503) and c.wid("d1") in r["error"]["message"], \
            r["error"]
    for (_, n), r in zip(jobs, results):
        assert r["error"] is not None or len(r["ids"]) == n
    assert len(failed) < len(jobs)

    async def more(k: int):
        async with _session() as s:
            return await asyncio.gather(*(_stream(s, c.url, *_prompt(i)) for i in range(k)))

    assert all(r["error"] is None and r["ids"] == c.reference[i]
               for i, r in enumerate(_run(more(6))))  # the front keeps serving, on d2
    c.workers["d1"] = _start("d1", c.logs, listen=d1.addr)
    auth = {"Authorization": f"Bearer {TOKEN}"}

    def back_in_rotation() -> bool:
        import urllib.request

        req = urllib.request.Request(c.url + "/admin/workers", headers=auth)
        with urllib.request.urlopen(req, timeout=10) as r:
            ws = json.load(r)["workers"]
        return any(w["worker"] == c.wid("d1") and w["alive"] for w in ws)

    _wait(back_in_rotation, "the front re-probes d1 and takes it back")
    t1 = time.time()
    assert all(r["error"] is None and r["ids"] == c.reference[i]
               for i, r in enumerate(_run(more(8))))
    _wait(lambda: _steps_by_worker(c, t1)[c.wid("d1")] > 0, "the restarted d1 decodes again")
