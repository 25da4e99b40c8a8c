"""The intra layout's shared KV ring: spans, the wrap, out-of-order release, a full ring."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest
import torch

from gpuprobe.errors import UserError
from gpuprobe.server import kv_ring
from gpuprobe.server.handoff import PipeHandoff
from gpuprobe.server.kv_ring import ALIGN, KvRing


@pytest.fixture
def ring_file():
    made = kv_ring.create_file(kv_ring.MIN_MB)
    assert made is not None
    yield made
    os.unlink(made[0])


def test_alloc_wraps_and_waits_for_release(ring_file):
    w, r = KvRing(*ring_file), KvRing(*ring_file)
    size = w.size
    a = w.alloc(size // 2)
    b = w.alloc(size // 3)
    assert a == (0, size // 2, 0)
    assert b[2] == size // 2
    assert w.alloc(size // 2) is None  # a third half does not fit until a is released
    r.release(a[0], a[1])
    c = w.alloc(size // 2)  # crosses the end: starts at 0 and holds the skipped bytes
    assert c is not None and c[2] == 0 and c[1] - c[0] > size // 2
    assert w.alloc(ALIGN) is None  # b and c fill it


def test_out_of_order_release_moves_tail_only_over_contiguous_spans(ring_file):
    w, r = KvRing(*ring_file), KvRing(*ring_file)
    spans = [w.alloc(1000) for _ in range(3)]
    r.release(*spans[1][:2])
    assert w.tail() == 0
    r.release(*spans[0][:2])
    assert w.tail() == spans[1][1]
    r.release(*spans[2][:2])
    assert w.tail() == spans[2][1]


def test_pipe_handoff_through_ring_and_fallback(ring_file):
    a, b = mp.Pipe()
    send = PipeHandoff("prefill", a, KvRing(*ring_file))
    recv = PipeHandoff("decode", b, KvRing(*ring_file))
    kv = torch.randn(2, 2, 37, 3, 8)
    send.send({"rid": "r1"}, kv)
    big = torch.zeros(send.ring.size // 4 + 1, dtype=torch.float32)  # more than the ring
    send.send({"rid": "r2"}, big)
    (m1, k1), (m2, k2) = recv.receive_ready()
    assert m1["rid"] == "r1" and "kv_ring_span" in m1 and m1["kv_bytes"] == kv.numel() * 4
    assert torch.equal(k1, kv)
    assert "kv_ring_span" not in m2 and send.ring_misses == 1  # torch's handles carried it
    assert k2.shape == big.shape
    recv.release(m1)
    assert send.ring.tail() == m1["kv_ring_span"][1]


def test_create_file_off_when_asked(monkeypatch):
    monkeypatch.setenv("GPUPROBE_KV_RING_MB", "0")
    assert kv_ring.create_file() is None


@pytest.mark.parametrize("raw,mb", [("", kv_ring.DEFAULT_MB), (" 64 ", 64), ("0", 0)])
def test_ring_size_from_env(monkeypatch, raw, mb):
    monkeypatch.setenv("GPUPROBE_KV_RING_MB", raw)
    assert kv_ring.ring_mb() == mb


@pytest.mark.parametrize("raw", ["-1", "2G", "1.5", "\u00b2"])
def test_malformed_ring_size_is_a_user_error(monkeypatch, raw):
    monkeypatch.setenv("GPUPROBE_KV_RING_MB", raw)
    with pytest.raises(UserError, match="GPUPROBE_KV_RING_MB"):
        kv_ring.ring_mb()
