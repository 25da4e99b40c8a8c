"""Memory that must fit: weights, activations and the runtime's buffers per device, the KV
cache in what is left of --gpu-memory-utilization, refusals with the numbers, and the
simulator's KV capacity following from it."""
import pytest

from gpuprobe.cli.main import main
from gpuprobe.decide.candidates import Candidate
from gpuprobe.decide.predict import layout_config
from gpuprobe.perf.memory import memory_fit, smallest_tp, worker_memory
from gpuprobe.perf.roofline import roofline_profile
from gpuprobe.perf.specs import GIB, gpu, model_shape

H200 = gpu("h200")


def test_llama70b_at_tp1_does_not_fit_an_h200_and_tp2_does():
    shape = model_shape("llama3-70b")
    one = memory_fit(shape, H200, tp=1)
    assert shape.weights_bytes() == pytest.approx(141.1e9, rel=1e-3)  # 70.55 B params in bf16
    assert not one.fits and one.max_kv_tokens == 0
    assert one.budget_bytes == pytest.approx(141 * GIB * 0.9)
    assert "weights 131.4 GiB" in one.why() and "more than 141 GiB x 0.9 = 126.9 GiB" in one.why()
    two = memory_fit(shape, H200, tp=2)
    assert two.fits and two.weights_bytes == pytest.approx(one.weights_bytes / 2)
    # 80 layers x 2 x 4 KV heads per device x 128 x 2 bytes a token
    assert two.kv_bytes_per_token == 163840
    assert two.max_kv_tokens == int(two.kv_bytes // 163840)
    assert smallest_tp(shape, H200) == 2 and smallest_tp(shape, gpu("l40s")) == 4


def test_the_profile_command_refuses_it_in_one_line(capsys, tmp_path):
    out = tmp_path / "p.json"
    rc = main(["profile", "--spec", "h200", "--model-shape", "llama3-70b", "--engine", "roofline",
               "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not out.exists()
    assert err.count("\n") == 0 and "does not fit" in err and "126.9 GiB" in err
    assert "--tp 2 is the smallest TP size that fits" in err
    assert main(["profile", "--spec", "h200", "--model-shape", "llama3-70b", "--engine",
                 "roofline", "--tp", "2", "--out", str(out)]) == 0
    assert '"monolithic": 2' in capsys.readouterr().out


def test_kv_capacity_follows_memory_and_reaches_the_simulator():
    p8 = roofline_profile("llama3-8b", "h200")
    mono = p8.workers["monolithic"]
    # (141 GiB x 0.9 - 16.06 GB weights - 0.74 GB activations - 3.5 GiB) / 128 KiB a token
    assert mono.max_kv_tokens == 882728
    low = roofline_profile("llama3-8b", "h200", gpu_memory_utilization=0.5)
    assert low.workers["monolithic"].max_kv_tokens < mono.max_kv_tokens / 2
    cfg = layout_config(Candidate("monolithic"), 1000, None, p8)
    assert cfg.mixed.num_blocks == 882728 // 16
    assert layout_config(Candidate("monolithic"), 1000, {"num_blocks": 7}, p8).mixed.num_blocks == 7
    cross = layout_config(Candidate("cross"), 1000, None,
                          roofline_profile("llama3-8b", "h200", decode_tp=2))
    assert cross.decode.num_blocks > 2 * cross.prefill.num_blocks  # TP2 decode: half the weights


def test_two_intra_engines_each_hold_the_weights():
    shape, l40s = model_shape("llama3-8b"), gpu("l40s")
    fits = worker_memory(shape, dict.fromkeys(("monolithic", "cross.prefill", "cross.decode"), l40s),
                         dict.fromkeys(("monolithic", "cross.prefill", "cross.decode"), 1))
    mono, pre, dec = fits["monolithic"], fits["intra.prefill"], fits["intra.decode"]
    used = mono.weights_bytes + mono.activation_bytes + mono.reserved_bytes
    left = mono.budget_bytes - 2 * used
    assert pre.max_kv_tokens == int(left / 3 // mono.kv_bytes_per_token)
    assert dec.max_kv_tokens == int(2 * left / 3 // mono.kv_bytes_per_token)
    assert "x2 engines" in pre.why() and pre.fits


def test_a_search_gets_each_tp_worker_with_what_it_holds():
    from gpuprobe.perf.silicon_profile import tp_worker

    one, fit1 = tp_worker("llama3-70b", "h200", None, tp=1)  # None: the roofline, as asked
    two, fit2 = tp_worker("llama3-70b", "h200", None, tp=2)
    assert not fit1.fits and one.max_kv_tokens == 0 and "126.9 GiB" in fit1.why()
    assert fit2.fits and (two.tp, two.max_kv_tokens) == (2, fit2.max_kv_tokens) and \
        fit2.max_kv_tokens > 300_000
    assert fit2.kv_bytes_per_token == 163840 and fit2.weights_bytes == pytest.approx(70.55e9, rel=1e-3)
