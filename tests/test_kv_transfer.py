"""The cross layout's KV wire format, over a real socket pair: raw tensors round-trip exactly,
other KV shapes fall back to torch.save, and a payload that does not match its header is a
TransferError naming the mismatch."""
import json
import socket
import threading

import pytest
import torch

from gpuprobe.server import kv_transfer as K


def _roundtrip(kv, extra=None):
    a, b = socket.socketpair()
    with a, b:
        fmt, payload = K.dump_payload(kv)
        a.settimeout(5)
        b.settimeout(5)
        th = threading.Thread(target=K.send_message, args=(a, {"rid": "r1", **fmt, **(extra or {})}, payload))
        th.start()
        header, data = K.recv_message(b)
        th.join()
    return header, K.load_payload(data, header)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_one_tensor_goes_raw_and_comes_back_exact(dtype):
    kv = torch.randn(3, 2, 37, 4, 16).to(dtype)[:, :, 5:]  # a non-contiguous slice, as export may give
    header, got = _roundtrip(kv)
    assert header["kv_format"] == "raw" and header["kv_shape"] == [3, 2, 32, 4, 16]
    assert header["payload_bytes"] == kv.numel() * kv.element_size()
    assert got.dtype == dtype and torch.equal(got, kv)


def test_other_kv_shapes_fall_back_to_torch_save():
    kv = {"k": torch.ones(2, 3), "v": [torch.zeros(4)]}
    header, got = _roundtrip(kv)
    assert header["kv_format"] == "torch"
    assert torch.equal(got["k"], kv["k"]) and torch.equal(got["v"][0], kv["v"][0])
    _, empty = _roundtrip(torch.empty(0, 4))
    assert empty.shape == (0, 4)


def test_payload_that_does_not_match_its_header_is_a_transfer_error():
    data = bytearray(100)
    with pytest.raises(K.TransferError, match=r"100 bytes, kv_shape \[2, 8\] of float32 needs 64"):
        K.load_payload(data, {"kv_format": "raw", "kv_dtype": "float32", "kv_shape": [2, 8]})
    with pytest.raises(K.TransferError, match="bad kv_dtype 'not_a_dtype'"):
        K.load_payload(data, {"kv_format": "raw", "kv_dtype": "not_a_dtype", "kv_shape": [25]})
    with pytest.raises(K.TransferError, match="bad kv_dtype 'float32' or kv_shape \\[-1\\]"):
        K.load_payload(data, {"kv_format": "raw", "kv_dtype": "float32", "kv_shape": [-1]})
    with pytest.raises(K.TransferError, match="not a torch.save stream"):
        K.load_payload(b"garbage", {"kv_format": "torch"})


def test_a_truncated_message_is_a_transfer_error():
    a, b = socket.socketpair()
    with b:
        with a:
            head = json.dumps({"payload_bytes": 1000}).encode()
            a.sendall(K._LEN.pack(len(head)) + head + b"x" * 10)
        with pytest.raises(K.TransferError, match="peer closed after 10/1000 bytes"):
            K.recv_message(b)
