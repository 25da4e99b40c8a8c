"""validate calibrates prefills over every prompt length it will replay."""
from gpuprobe.workloads.calibrate import PREFILL_SIZES, prefill_sizes_for


def test_short_workloads_keep_the_standard_sweep():
    assert prefill_sizes_for(744, 2047) == PREFILL_SIZES
    assert prefill_sizes_for(1, 2047) == PREFILL_SIZES


def test_long_prompts_extend_the_sweep_to_cover_them():
    sizes = prefill_sizes_for(2042, 8191)
    assert sizes[: len(PREFILL_SIZES)] == PREFILL_SIZES
    assert sizes[-1] >= 2042 and sizes[-2] < 2042
    assert list(sizes) == sorted(set(sizes))


def test_the_sweep_never_passes_the_model_context():
    sizes = prefill_sizes_for(20000, 8191)
    assert max(sizes) == 8191 and list(sizes) == sorted(set(sizes))
    assert prefill_sizes_for(3000, 800)[-2:] == (768, 800)  # a short context: up to its end


def test_profile_max_prompt_is_checked_before_any_request():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "profile", "--target",
                           "http://127.0.0.1:9", "--max-prompt", "3"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["gpuprobe profile: error: --max-prompt must be "
                                                ">= 16, got 3"]
    assert prefill_sizes_for(100, 100) == (16, 32, 64, 100)


def test_decode_bursts_reach_the_workloads_contexts():
    from gpuprobe.workloads.calibrate import DECODE_PROMPTS, decode_prompts_for

    assert decode_prompts_for([100, 200, 400], 2048) == DECODE_PROMPTS  # Azure-like: as before
    longer = decode_prompts_for([900, 1100, 1800], 2048)
    assert longer[:len(DECODE_PROMPTS)] == DECODE_PROMPTS and longer[-1] == 1024 - 24
    assert decode_prompts_for([700], 8192)[-1] == 700  # the median context itself


def test_bursts_at_a_long_context_stop_at_a_small_batch():
    from gpuprobe.workloads.calibrate import DECODE_BATCHES, LONG_DECODE_MAX_BATCH, _batches_at

    assert _batches_at(320, DECODE_BATCHES) == DECODE_BATCHES
    assert max(_batches_at(1000, DECODE_BATCHES)) == LONG_DECODE_MAX_BATCH
