"""Step costs from measured silicon data against AIConfigurator's own static estimate.

gpuprobe composes Llama-3.1-8B's prefill and decode steps from AIConfigurator's kernel tables
at its own shapes and fits its StepCost form to them; AIConfigurator's estimate comes from its
SDK here (its Llama model read from its bundled HF config, its backend's run_static), so the
comparison is computed in the test, not copied in. Needs the extra (make test installs it).
"""
from __future__ import annotations

import pytest

pytest.importorskip("aiconfigurator_core")

from gpuprobe.perf.silicon_profile import spec_profile  # noqa: E402

PREFILL_TOKENS = (1024, 4096, 8192)
DECODE_BATCHES = (1, 16, 64, 256)
DECODE_CONTEXT = 2048
TOLERANCE = 0.10


def aic_static(system: str, tp: int) -> dict:
    """AIConfigurator's static estimate, seconds: {('prefill', T): .., ('decode', B): ..}."""
    from aiconfigurator_core.sdk import config, perf_database
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.models import get_model

    db = perf_database.get_database(system, "vllm",
                                    perf_database.get_latest_database_version(system, "vllm"))
    model = get_model("meta-llama/Meta-Llama-3.1-8B", config.ModelConfig(tp_size=tp), "vllm")
    backend = get_backend("vllm")
    out = {}
    for t in PREFILL_TOKENS:
        run = config.RuntimeConfig(batch_size=1, isl=t, osl=1)
        row = backend.run_static(model, db, run, mode="static_ctx").get_summary_df().iloc[0]
        out["prefill", t] = row["context_latency"] / 1e3
    for b in DECODE_BATCHES:  # one decode step of b sequences at the context
        run = config.RuntimeConfig(batch_size=b, isl=DECODE_CONTEXT, osl=2)
        row = backend.run_static(model, db, run, mode="static_gen").get_summary_df().iloc[0]
        out["decode", b] = row["generation_latency"] / 1e3
    return out


@pytest.mark.slow
@pytest.mark.parametrize("gpu,system", [("h200", "h200_sxm"), ("h100", "h100_sxm")])
@pytest.mark.parametrize("tp", [1, 2])
def test_llama8b_steps_within_10pct_of_aiconfigurator(gpu, system, tp):
    profile = spec_profile("llama3-8b", gpu, "vllm", tp=tp)
    assert profile.meta["source"] == "silicon"
    assert profile.meta["silicon"]["monolithic"]["system"] == system
    worker = profile.workers["monolithic"]
    assert worker.tp == tp and worker.prefill.origin == "measured silicon data"
    step = worker.step_fn()
    ours = {("prefill", t): step(t, t * t, 0, 0) for t in PREFILL_TOKENS}
    ours.update({("decode", b): step(0, 0, b, b * DECODE_CONTEXT) for b in DECODE_BATCHES})
    theirs = aic_static(system, tp)
    errors = {k: ours[k] / theirs[k] - 1 for k in theirs}
    assert max(abs(e) for e in errors.values()) <= TOLERANCE, errors


def test_tp2_adds_the_all_reduce_and_halves_the_rest():
    one, two = (spec_profile("llama3-8b", "h200", "vllm", tp=t).workers["monolithic"]
                for t in (1, 2))
    t1, t2 = one.step_fn()(8192, 8192 ** 2, 0, 0), two.step_fn()(8192, 8192 ** 2, 0, 0)
    # half the matmuls each, plus 65 all-reduces of 8192 x 4096 x 2 bytes: 0.5-0.7 of TP1
    assert 0.5 * t1 < t2 < 0.7 * t1
    assert two.max_kv_tokens > 2 * one.max_kv_tokens  # weights split: more than twice the KV


def test_no_data_for_the_engine_falls_back_to_the_roofline_and_says_so():
    p = spec_profile("llama3-8b", "h200", "vllm", version="0.0.1")  # no such data version
    assert p.meta["source"] == "roofline"
    assert "no measured silicon data (AIConfigurator" in p.meta["fallback"]
    assert "vllm 0.0.1 data for h200_sxm" in p.meta["fallback"]
    assert all(any("roofline instead" in r for r in w.reasons) for w in p.workers.values())
    assert p.workers["monolithic"].prefill.confidence == "low"
    assert p.workers["monolithic"].prefill.r2 is None  # a roofline curve was never fitted
