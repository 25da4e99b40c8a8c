"""What the worker link's safety costs: a KV message's receive CPU with the header checked
against the model (LinkLimits, before the payload is read) against the same message unchecked,
and a connection's setup: plain TCP, with the HMAC handshake, with TLS and the handshake. All
over real loopback sockets, baseline and variant in the same run; thread CPU and wall time,
medians of --reps.

    .venv/bin/python bench/link_bench.py [--reps 40]
"""
from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import threading
import time

import numpy as np
import torch

import pin
from gpuprobe.server import kv_transfer as K
from gpuprobe.server.link_auth import LinkConfig, connect
from gpuprobe.server.link_limits import LinkLimits
from gpuprobe.server.link_server import LinkCounters, LinkServer

SMOLLM = LinkLimits(vocab_size=49152, max_context=8192, kv_dtype="float32", kv_itemsize=4,
                    kv_dims=(30, 3, 64))  # smollm2-135m on a CPU: 45 KiB per token
SECRET = b"bench-secret-0123456789"


def _header(n: int) -> tuple[dict, memoryview]:
    kv = torch.randn(30, 2, n, 3, 64)
    fmt, payload = K.dump_payload(kv)
    return {"rid": "b", "prompt": list(range(1, n + 1)), "max_tokens": 16, "temperature": 0.0,
            "top_p": 1.0, "seed": None, "ignore_eos": True, "arrival_s": 1.0, "first_token": 7,
            "handoff_start_s": 1.0, "kv_bytes": len(payload), **fmt}, payload


def receive_cpu(n: int, reps: int, checked: bool) -> float:
    """Median receive-thread CPU (s) of one message of n tokens' KV."""
    header, payload = _header(n)
    a, b = socket.socketpair()
    cpu: list[float] = []

    def serve():
        for _ in range(reps):
            first = b.recv(1)
            c0 = time.thread_time()
            if checked:
                h, data = K.recv_message(b, SMOLLM.max_header_bytes, SMOLLM.check_kv_header,
                                         prefix=first)
            else:
                h, data = K.recv_message(b, prefix=first)
            K.load_payload(data, h)
            cpu.append(time.thread_time() - c0)

    th = threading.Thread(target=serve)
    th.start()
    for _ in range(reps):
        K.send_message(a, header, payload)
        time.sleep(0.003)
    th.join()
    a.close()
    b.close()
    return float(np.median(cpu))


def setup_s(reps: int, server_cfg: LinkConfig | None, client_cfg: LinkConfig | None) -> float:
    """Median wall time (s) to open a connection ready for frames."""
    if server_cfg is None:
        lst = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=lambda: [lst.accept()[0].close() for _ in range(reps)],
                         daemon=True).start()
        addr = lst.getsockname()
    else:
        srv = LinkServer("127.0.0.1:0", server_cfg, {"kv": lambda s, p: s.recv(1)},
                         LinkCounters()).start()
        addr = K.parse_addr(srv.address)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        sock = socket.create_connection(addr) if client_cfg is None else \
            connect(addr, client_cfg, "kv")
        times.append(time.perf_counter() - t0)
        sock.close()
    return float(np.median(times))


def main() -> None:
    args = pin.args_like_a_worker()
    print(f"{'smollm2-135m KV':16} {'tokens':>6} {'MiB':>6} {'unchecked':>10} {'checked':>9} "
          f"{'ratio':>6}   (ms receive CPU per message)")
    for n in (32, 320, 744):
        plain, checked = (receive_cpu(n, args.reps, c) for c in (False, True))
        print(f"{'':16} {n:6} {n * SMOLLM.kv_bytes_per_token / 2**20:6.1f} {plain * 1e3:10.3f} "
              f"{checked * 1e3:9.3f} {checked / plain:5.2f}x")
    base = setup_s(args.reps, None, None)
    hmac_s = setup_s(args.reps, LinkConfig(SECRET), LinkConfig(SECRET))
    rows = [("plain TCP", base), ("HMAC handshake", hmac_s)]
    if shutil.which("openssl"):
        with tempfile.TemporaryDirectory() as d:
            cert, key = f"{d}/c.pem", f"{d}/k.pem"
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days",
                            "1", "-subj", "/CN=b", "-keyout", key, "-out", cert], check=True,
                           capture_output=True)
            rows.append(("TLS + HMAC", setup_s(args.reps, LinkConfig(SECRET, cert, key),
                                                LinkConfig(SECRET, ca=cert))))
    for name, s in rows:
        print(f"connection setup, {name:15} {s * 1e3:8.3f} ms  {s / base:6.1f}x plain")


if __name__ == "__main__":
    main()
