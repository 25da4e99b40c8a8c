"""KV handoff CPU per message, raw tensor bytes (the wire format) against torch.save/torch.load
(the format before it), over a real loopback TCP connection, both timed in the same run.

The receive side's CPU is what the cross decode worker's receive thread takes from the core its
decode loop runs on; the send side's is the prefill worker's. Thread CPU time, median of --reps.

    .venv/bin/python bench/kv_transfer_bench.py [--reps 40]
"""
from __future__ import annotations

import io
import socket
import threading
import time

import numpy as np
import torch

import pin
from gpuprobe.server import kv_transfer as K

SHAPES = {  # name: (layers, kv heads, head dim, dtype): 2 * product * itemsize bytes per token
    "tiny (2 KiB/token)": (2, 2, 64, torch.float32),
    "smollm2-135m (45 KiB/token)": (30, 3, 64, torch.float32),
}


def torch_format(kv):
    buf = io.BytesIO()
    torch.save(kv, buf)
    return {"kv_format": "torch"}, buf.getvalue()


def measure(dump, kv, reps: int) -> tuple[float, float]:
    """(median send CPU s, median receive CPU s) per message."""
    lst = K.listen("127.0.0.1:0")
    addr = f"127.0.0.1:{lst.getsockname()[1]}"
    recv_cpu: list[float] = []

    def serve():
        sock, _ = lst.accept()
        with sock:
            for _ in range(reps):
                sock.recv(1, socket.MSG_PEEK)  # the message has started, as in TcpHandoff
                c0 = time.thread_time()
                header, data = K.recv_message(sock)
                K.load_payload(data, header)
                recv_cpu.append(time.thread_time() - c0)

    th = threading.Thread(target=serve)
    th.start()
    sock = K.connect(addr, 5.0)
    send_cpu = []
    with sock:
        for _ in range(reps):
            c0 = time.thread_time()
            fmt, payload = dump(kv)
            K.send_message(sock, {"rid": "x", **fmt}, payload)
            send_cpu.append(time.thread_time() - c0)
            time.sleep(0.005)  # one message at a time, as a handoff outside a burst
        th.join()
    lst.close()
    return float(np.median(send_cpu)), float(np.median(recv_cpu))


def main() -> None:
    args = pin.args_like_a_worker()
    print(f"{'model':28} {'tokens':>6} {'KiB':>7} {'recv torch':>10} {'recv raw':>9} {'ratio':>6}"
          f" {'send torch':>10} {'send raw':>9} {'ratio':>6}   (ms CPU per message)")
    for name, (layers, heads, dim, dtype) in SHAPES.items():
        for tokens in (32, 320, 744):
            kv = torch.randn(layers, 2, tokens, heads, dim).to(dtype)
            st, rt = measure(torch_format, kv, args.reps)
            sr, rr = measure(K.dump_payload, kv, args.reps)
            kib = kv.numel() * kv.element_size() / 1024
            print(f"{name:28} {tokens:6} {kib:7.0f} {rt * 1e3:10.3f} {rr * 1e3:9.3f} {rt / rr:5.1f}x"
                  f" {st * 1e3:10.3f} {sr * 1e3:9.3f} {st / sr:5.1f}x")


if __name__ == "__main__":
    main()
