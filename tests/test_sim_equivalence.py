"""The simulator's fast paths give the same per-request results as the unoptimized baseline.

Two baselines, for every layout, with preemptions (a small KV cache), with prefill-first and
with chunked prefill (a decode budget smaller than the batch, so some decodes wait a step):
- the same run with macro-steps disabled: every step through Scheduler.schedule() and
  postprocess(), exactly as the reference server drives it; results must be identical;
- golden numbers recorded with the simulator as it was before its speed work (2026-11-29,
  tests/fixtures/sim_golden.json); equal to 1e-9 relative (step times were summed in a
  different order then). Regenerate only for an intended change of results:
  `.venv/bin/python tests/test_sim_equivalence.py --regen`.
"""
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuprobe.engine.scheduler import Scheduler, SchedulerConfig
from gpuprobe.sim import engine as sim_engine
from gpuprobe.perf.costmodel import Link, Overhead, Profile, simple_worker
from gpuprobe.perf.metrics import Slo
from gpuprobe.sim.layouts import LayoutConfig
from gpuprobe.sim.simulator import simulate

GOLDEN = Path(__file__).parent / "fixtures" / "sim_golden.json"
COLUMNS = ("ttft_s", "e2e_s", "tbt_max_s")  # tbt_mean_s follows from ttft_s and e2e_s
SUMMARY = ("ttft_p50_s", "ttft_p99_s", "tbt_p50_s", "tbt_p90_s", "tbt_p99_s", "tbt_mean_s",
           "throughput_tok_s", "slo_attainment", "num_completed")
CASES = {
    "prefill_first": LayoutConfig(
        mixed=SchedulerConfig(num_blocks=600, max_num_seqs=16),
        prefill=SchedulerConfig(role="prefill", num_blocks=600),
        decode=SchedulerConfig(role="decode", num_blocks=600, max_num_seqs=16)),
    "chunked": LayoutConfig(
        mixed=SchedulerConfig(num_blocks=500, max_num_seqs=32, chunked_prefill_tokens=96),
        prefill=SchedulerConfig(role="prefill", num_blocks=600, chunked_prefill_tokens=128),
        decode=SchedulerConfig(role="decode", num_blocks=500, max_num_seqs=32,
                               chunked_prefill_tokens=24)),
}
LAYOUTS = ("monolithic", "intra", "cross")


def _profile(attention: str = "paged") -> Profile:
    w = simple_worker(0.01, 1e-4, 1e-8, 0.005, 1e-3, 1e-6, decode_attention=attention)
    return Profile(workers={"monolithic": w, "intra.prefill": w, "intra.decode": w,
                            "cross.prefill": w, "cross.decode": w},
                   links={"intra": Link(0.0, 1e12), "cross": Link(0.002, 1e9)},
                   overhead=Overhead(request_in_s=0.003, token_out_s=0.001),
                   kv_bytes_per_token=1000)


def _trace(n: int = 300, seed: int = 11) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"arrival_s": np.cumsum(rng.exponential(0.04, n)),
                         "prompt_tokens": rng.integers(1, 700, n),
                         "output_tokens": rng.integers(1, 160, n)})


def _run(case: str, layout: str, attention: str = "paged"):
    # the SLO the baseline was recorded under (the default before the chat preset became it)
    return simulate(_trace(), _profile(attention), layout, slo=Slo(2.0, 0.2), config=CASES[case])


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("attention", ["paged", "padded"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_fast_path_equals_single_steps_exactly(case, layout, attention, monkeypatch):
    # padded: the macro-step's C is B * the longest context, kept by the lazy run's key heap
    fast = _run(case, layout, attention)
    key = "monolithic" if layout == "monolithic" else "decode"
    assert fast.summary[f"{key}_macro_steps"] > 0
    monkeypatch.setattr(sim_engine, "MIN_MACRO_STEPS", 10 ** 9)
    slow = _run(case, layout, attention)
    assert slow.summary[f"{key}_macro_steps"] == 0
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    for k in SUMMARY:
        assert fast.summary[k] == slow.summary[k] or (np.isnan(fast.summary[k])
                                                    and np.isnan(slow.summary[k])), k


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_results_equal_the_recorded_baseline(case, layout, golden):
    want = golden[f"{case}/{layout}"]
    got = _run(case, layout)
    for col in COLUMNS:
        np.testing.assert_allclose(got.requests[col].to_numpy(),
                                   np.array(want[col], dtype=float), rtol=1e-9, err_msg=col)
    for k in SUMMARY:
        assert got.summary[k] == pytest.approx(want["summary"][k], rel=1e-9, nan_ok=True), k


@pytest.mark.parametrize("layout", LAYOUTS)
def test_padded_decode_attention_costs_more_on_unequal_contexts(layout):
    # The trace's prompts are 1-700 tokens: B * the longest context is well above their sum,
    # so every decode step is longer and so is the mean gap between tokens.
    paged, padded = (_run("prefill_first", layout, a).summary for a in ("paged", "padded"))
    assert padded["tbt_mean_s"] > 1.05 * paged["tbt_mean_s"]


def test_the_cases_exercise_preemption_and_partial_decode_steps(monkeypatch):
    # Without these the equivalence above would not cover the scheduler's hard paths.
    counts = {"preempt": 0, "partial": 0}
    preempt, decodes = Scheduler._preempt, Scheduler._schedule_decodes

    def counting_preempt(self, seq):
        counts["preempt"] += 1
        preempt(self, seq)

    def counting_decodes(self, max_seqs):
        decode, preempted = decodes(self, max_seqs)
        counts["partial"] += len(decode) == max_seqs < sum(s.is_prefill_done for s in self.running)
        return decode, preempted
    monkeypatch.setattr(Scheduler, "_preempt", counting_preempt)
    monkeypatch.setattr(Scheduler, "_schedule_decodes", counting_decodes)
    monkeypatch.setattr(sim_engine, "MIN_MACRO_STEPS", 10 ** 9)
    for case in CASES:
        for layout in LAYOUTS:
            _run(case, layout)
    assert counts["preempt"] > 0 and counts["partial"] > 0


def _short(v) -> float:
    return float(f"{v:.13g}")  # 13 digits: plenty for rtol 1e-9, half the file


def _regen() -> None:
    out = {}
    for case in CASES:
        for layout in LAYOUTS:
            res = _run(case, layout)
            rec = {c: [None if np.isnan(v) else _short(v) for v in res.requests[c]]
                   for c in COLUMNS}
            rec["summary"] = {k: _short(res.summary[k]) for k in SUMMARY}
            out[f"{case}/{layout}"] = rec
    GOLDEN.write_text(json.dumps(out, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["--regen"]:
        sys.exit("usage: test_sim_equivalence.py --regen")
    _regen()


def _with_import(i0: float, i1: float) -> Profile:
    from dataclasses import replace

    prof = _profile()
    workers = {k: replace(w, import_s=i0, import_per_token_s=i1) if k.endswith("decode") else w
               for k, w in prof.workers.items()}
    return replace(prof, workers=workers)


@pytest.mark.parametrize("layout", ("intra", "cross"))
def test_kv_import_cost_is_exact_under_macro_steps_and_slows_decode(layout, monkeypatch):
    # A per-admission import cost on the decode worker: the fast path must still equal single
    # steps, and each admission must hold up the running batch (TBT up, TTFT untouched).
    cfg = CASES["prefill_first"]
    base = simulate(_trace(), _profile(), layout, config=cfg)
    fast = simulate(_trace(), _with_import(0.002, 2e-6), layout, config=cfg)
    monkeypatch.setattr(sim_engine, "MIN_MACRO_STEPS", 10 ** 9)
    slow = simulate(_trace(), _with_import(0.002, 2e-6), layout, config=cfg)
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    assert fast.summary["tbt_p50_s"] > base.summary["tbt_p50_s"]
    np.testing.assert_array_equal(fast.requests["ttft_s"], base.requests["ttft_s"])
    assert fast.summary["decode_busy_s"] > base.summary["decode_busy_s"]


def test_zero_import_term_changes_nothing():
    cfg = CASES["chunked"]
    a = simulate(_trace(), _profile(), "cross", config=cfg)
    b = simulate(_trace(), _with_import(0.0, 0.0), "cross", config=cfg)
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)


def _prefill_worker(fast: bool, monkeypatch, noisy: bool):
    from gpuprobe.sim.engine import SimEngine
    from gpuprobe.sim.layouts import _sequences

    monkeypatch.setattr(sim_engine, "MIN_MACRO_STEPS", 1 if fast else 10 ** 9)
    rng = np.random.default_rng(5)
    n = 400
    prompts, outputs = rng.integers(1, 700, n), rng.integers(1, 4, n)  # some end at prefill
    seqs = _sequences(prompts, outputs, rng.integers(0, 300, n))  # some prompts part-cached
    arrival = np.cumsum(rng.exponential(0.004, n)).tolist()  # a queue builds up
    # blocks cover the whole prompt, the budget only its uncached part: either can stop first;
    # a prompt over the budget runs alone
    cfg = SchedulerConfig(role="prefill", num_blocks=45, max_num_seqs=3,
                          max_num_batched_tokens=600)
    w = _profile().workers["cross.prefill"]
    if noisy:
        from dataclasses import replace
        w = replace(w, prefill_noise=(0.9, 1.0, 1.2))
    eng = SimEngine(cfg, w, np.random.default_rng(1))
    eng.run(arrival, seqs, arrival)
    state = [(s.seq_id, s.num_tokens, s.num_computed_tokens, s.status, s.finish_reason,
              s.block_table) for s in seqs]
    return eng, state


@pytest.mark.parametrize("noisy", [False, True])
def test_prefill_worker_fast_steps_equal_the_schedulers(noisy, monkeypatch):
    # Admission stops on each of its limits (blocks, max_num_seqs, the token budget) and some
    # requests finish at their first token: the fast step must leave what the Scheduler's does.
    stops = {"blocks": 0, "seqs": 0}
    from gpuprobe.sim.scheduler import KvPool
    can, admit = KvPool.can_allocate, Scheduler._admit

    def counting_admit(self, budget, whole):
        chunks = admit(self, budget, whole)
        stops["seqs"] += len(chunks) == self.config.max_num_seqs
        return chunks

    def counting(self, seq, num_tokens):
        ok = can(self, seq, num_tokens)
        stops["blocks"] += not ok
        return ok
    monkeypatch.setattr(KvPool, "can_allocate", counting)
    monkeypatch.setattr(Scheduler, "_admit", counting_admit)
    slow, slow_state = _prefill_worker(False, monkeypatch, noisy)
    assert stops["blocks"] > 0 and stops["seqs"] > 0
    fast, fast_state = _prefill_worker(True, monkeypatch, noisy)
    assert fast_state == slow_state
    assert fast.first_s == slow.first_s
    assert [s.seq_id for s in fast.prefilled] == [s.seq_id for s in slow.prefilled]
    assert list(fast.prefilled_s) == list(slow.prefilled_s)
    assert (fast.num_steps, fast.busy_s, fast.max_prefill_tokens, [s.seq_id for s in fast.rejected]) \
        == (slow.num_steps, slow.busy_s, slow.max_prefill_tokens, [s.seq_id for s in slow.rejected])
    assert len(fast.prefilled) < len(fast.first_s)  # some finished at their first token
    assert fast.num_steps < len(fast.first_s)  # some steps took several prompts
