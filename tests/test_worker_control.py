"""The control connection between a front and a standalone worker, without a model: the
front's RemoteWorkerHandle (asyncio) against the worker's ControlChannel behind a real
LinkServer, over TLS where openssl can make a certificate. Messages flow both ways at once
(one thread per connection reads and writes it), an add the model cannot take is answered with
an error instead of closing the link, and a second front replaces the first."""
from __future__ import annotations

import asyncio
import selectors
import shutil
import subprocess
import threading
import time

import pytest

from waiting import wait_for

from gpuprobe.server.link_auth import LinkConfig
from gpuprobe.server.link_limits import LinkLimits
from gpuprobe.server.link_server import LinkCounters, LinkServer
from gpuprobe.server.remote_handle import RemoteSpec, RemoteWorkerHandle
from gpuprobe.server.worker_control import ControlChannel

SECRET = b"control-test-secret-0123"
LIMITS = LinkLimits(vocab_size=512, max_context=64, kv_dtype="float32", kv_itemsize=4,
                    kv_dims=(4, 2, 32))


def _request(i: int, **change) -> dict:
    return {"rid": f"r{i}", "prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0.0,
            "top_p": 1.0, "seed": None, "ignore_eos": True, "arrival_s": 1.0, **change}


def _worker(ch: ControlChannel, seen: list, stop: threading.Event) -> None:
    """A stand-in engine loop: each add is answered with one finished token."""
    sel = selectors.DefaultSelector()
    sel.register(ch.fileno(), selectors.EVENT_READ)
    while not stop.is_set():
        sel.select(0.05)
        while ch.poll():
            msg = ch.recv()
            seen.append(msg[0])
            if msg[0] == "add":
                ch.send(("step", [[msg[1]["rid"], 7, 0, True, "length"]], {}, {}))


@pytest.fixture(params=["plain", "tls"])
def link(request, tmp_path):
    if request.param == "plain":
        return LinkConfig(SECRET), LinkConfig(SECRET)
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a certificate")
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=w", "-keyout", str(key), "-out", str(cert)], check=True,
                   capture_output=True)
    return LinkConfig(SECRET, str(cert), str(key)), LinkConfig(SECRET, ca=str(cert))


def test_messages_flow_both_ways_and_a_new_front_takes_over(link):
    worker_cfg, front_cfg = link
    ch = ControlChannel()
    ch.limits = LIMITS
    ch.send(("ready", {"role": "decode", "model": "tiny", "max_context": 64, "pid": 1}))
    counters = LinkCounters()
    server = LinkServer("127.0.0.1:0", worker_cfg, {"control": ch.serve}, counters).start()
    seen, stop = [], threading.Event()
    threading.Thread(target=_worker, args=(ch, seen, stop), daemon=True).start()

    async def front():
        got, lost = [], []
        spec = RemoteSpec("decode@w", "decode", server.address)
        first = RemoteWorkerHandle(spec, front_cfg,
                                   lambda i, w, m: (got if m[0] != "died" else lost).append(m))
        await first.connect("tiny", 64)
        for i in range(300):  # adds stream in while steps stream out
            first.send(("add", _request(i)))
        first.send(("add", _request(300, prompt=[1, 999])))  # not in the vocabulary
        deadline = time.monotonic() + 30
        while len(got) < 301 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        second = RemoteWorkerHandle(spec, front_cfg, lambda i, w, m: None)
        await second.connect("tiny", 64)
        while not lost and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await second.close()
        return got, lost, first.info

    try:
        got, lost, info = asyncio.run(front())
        # the second front's reset reaches the engine loop on its own thread, maybe after the
        # first front has heard that it was replaced
        wait_for(lambda: seen.count("reset") >= 2, "the second front's reset", 30)
    finally:
        stop.set()
        server.close()
    steps = [m for m in got if m[0] == "step"]
    assert [m[1][0][0] for m in steps] == [f"r{i}" for i in range(300)]
    errors = [m for m in got if m[0] == "error"]
    assert len(errors) == 1 and errors[0][1] == "r300" and "[0, 512)" in errors[0][2]
    assert info["role"] == "decode" and info["protocol"] == 1
    assert len(lost) == 1 and "lost" in lost[0][1]  # the first front, replaced
    assert seen.count("add") == 300 and seen.count("reset") >= 2
    assert sum(counters.refused.values()) == 0 and counters.accepted == {"control": 2}
