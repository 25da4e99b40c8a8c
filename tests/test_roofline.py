"""Roofline profiles from datasheets: sensible magnitudes, per-role GPUs, clear errors."""
import pytest

from gpuprobe.errors import UserError
from gpuprobe.perf.roofline import GPUS, model_shape, roofline_profile


def test_llama8b_decode_on_h200_is_memory_bound():
    p = roofline_profile("llama3-8b", "h200")
    shape = model_shape("llama3-8b")
    step = p.workers["monolithic"].step_fn()
    t1 = step(0, 0, 1, 1000)
    # ~16 GB of weights at 0.8 x 4.8 TB/s plus 1 ms launch: about 5 ms.
    assert 0.003 < t1 < 0.008
    assert shape.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2
    # Prefill of 2,048 tokens is compute-bound: well above one decode step.
    assert step(2048, 2048 ** 2, 0, 0) > 5 * t1
    assert all(f.source == "roofline" for w in p.workers.values() for f in (w.prefill, w.decode))
    assert p.confidence(("monolithic",))["level"] == "low"
    curve = p.to_dict()["workers"]["monolithic"]["prefill"]  # never fitted: no R^2, not high
    assert (curve["r2"], curve["confidence"], curve["origin"]) == (None, "low", "roofline")


def test_tp2_splits_the_work_and_adds_two_all_reduces_a_layer():
    one, two = (roofline_profile("llama3-8b", "h200", tp=t).workers["monolithic"] for t in (1, 2))
    assert (one.tp, two.tp) == (1, 2)
    shape = model_shape("llama3-8b")
    # a ring all-reduce of 4096 x 2 bytes a token over 900 GB/s: 2 (2-1)/2 x 8192 / 9e11
    per_token = 2 * shape.layers * 8192 / 900e9
    assert two.decode.coef[1] == pytest.approx(one.decode.coef[1] / 2 + per_token)
    assert two.decode.coef[2] == pytest.approx(one.decode.coef[2] / 2)  # half the KV heads each


def test_cross_roles_on_different_gpus():
    p = roofline_profile("llama3-8b", "h200", prefill_gpu="l40s", decode_gpu="h200")
    pre = p.worker("cross", "prefill").step_fn()(1024, 1024 ** 2, 0, 0)
    mono = p.worker("monolithic", "mixed").step_fn()(1024, 1024 ** 2, 0, 0)
    assert pre > 2 * mono  # L40S has about a third of the H200's BF16 peak
    assert p.link("cross").bytes_per_s <= GPUS["l40s"].link_bytes_per_s
    assert p.worker("intra", "decode").step_fn()(0, 0, 8, 8000) > p.worker("monolithic", "mixed").step_fn()(0, 0, 8, 8000)


def test_unknown_names_are_user_errors():
    with pytest.raises(UserError, match="unknown GPU"):
        roofline_profile("llama3-8b", "tpu9")
    with pytest.raises(UserError, match="unknown model shape"):
        roofline_profile("gpt-99", "h200")
