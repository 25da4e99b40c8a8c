"""The intra layout's SM split (pure arithmetic; the driver calls need a GPU, see
bench/green_probe.py) and the intra KV hand-over's choice of memory."""
import torch

from gpuprobe.server.green_partition import SM_GRANULARITY, prefill_sm_count
from gpuprobe.server.handoff import PipeHandoff


def test_prefill_sm_count_rounds_down_and_leaves_decode_a_group():
    assert prefill_sm_count(132, 0.5) == 64  # H100/H200: 132 SMs
    assert prefill_sm_count(132, 0.6) == 72
    assert prefill_sm_count(132, 0.01) == SM_GRANULARITY  # never empty
    assert prefill_sm_count(132, 0.99) == 120  # 132 - 8 would be 124: rounded to whole groups
    assert prefill_sm_count(132, 0.99) <= 132 - SM_GRANULARITY
    for share in (0.1, 0.3, 0.5, 0.7, 0.9):
        n = prefill_sm_count(108, share)
        assert n % SM_GRANULARITY == 0 and SM_GRANULARITY <= n <= 108 - SM_GRANULARITY


def test_pipe_handoff_sends_a_cpu_copy_not_a_view(monkeypatch):
    cache = torch.arange(24.0).view(2, 3, 4)
    h = PipeHandoff("prefill", conn=None)
    out = h._portable(cache[0])
    assert out.device.type == "cpu" and torch.equal(out, cache[0])
    assert out.untyped_storage().nbytes() == cache[0].numel() * cache.element_size()
    monkeypatch.setenv("GPUPROBE_INTRA_KV", "host")
    assert not PipeHandoff("prefill", conn=None).on_device


def test_mps_running_reads_the_control_pipe(tmp_path, monkeypatch):
    from gpuprobe.server.green_partition import mps_running

    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path))
    assert not mps_running()
    (tmp_path / "control").touch()
    assert mps_running()
