import subprocess
import sys

import pytest

from gpuprobe.engine import (Batch, LLMEngine, SamplingParams, Scheduler, SchedulerConfig,
                             Sequence, SeqStatus)

EOS = 2


class FakeRunner:
    """Returns a fixed token for every sequence that samples; records each batch."""

    def __init__(self, token_id: int = 7):
        self.token_id = token_id
        self.batches: list[Batch] = []

    def run(self, batch: Batch) -> dict[str, int]:
        self.batches.append(batch)
        out = {c.seq.seq_id: self.token_id for c in batch.prefill if c.is_last}
        out.update({s.seq_id: self.token_id for s in batch.decode})
        return out


def make_seq(i: int, prompt_len: int = 8, max_tokens: int = 4, **kw) -> Sequence:
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, **kw)
    return Sequence(f"r{i}", [10 + i] * prompt_len, params)


def run_to_end(engine: LLMEngine, max_steps: int = 10_000) -> dict[str, list[int]]:
    """Step until done; returns the tokens each request got from here on."""
    tokens: dict[str, list[int]] = {}
    first_index: dict[str, int] = {}
    for _ in range(max_steps):
        if not engine.has_unfinished():
            return tokens
        events, _ = engine.step()
        for e in events:
            start = first_index.setdefault(e.seq_id, e.index)
            assert e.index == start + len(tokens.setdefault(e.seq_id, []))
            tokens[e.seq_id].append(e.token_id)
    raise AssertionError("engine did not finish")


def test_scheduler_and_model_shapes_do_not_import_torch():
    # The simulator drives this scheduler and reads model shapes without torch.
    code = ("import sys, gpuprobe.engine, gpuprobe.llama; gpuprobe.llama.resolve_model('tiny'); "
            "print('torch' in sys.modules or 'numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_continuous_batching_admits_new_requests_while_others_decode():
    sched = Scheduler(SchedulerConfig(num_blocks=64, block_size=4))
    engine = LLMEngine(sched, FakeRunner())
    engine.add_request(make_seq(0, max_tokens=10))
    engine.step()  # prefill r0
    engine.step()  # decode r0
    late = make_seq(1, max_tokens=3)
    engine.add_request(late)
    _, record = engine.step()
    assert record.num_prefill_seqs == 1 and record.num_decode_seqs == 0  # prefill-first
    _, record = engine.step()
    assert record.num_decode_seqs == 2  # both decode together
    run_to_end(engine)
    assert late.num_completion_tokens == 3 and late.finish_reason == "length"


def test_every_request_gets_exactly_max_tokens_and_frees_its_blocks():
    sched = Scheduler(SchedulerConfig(num_blocks=256, block_size=4, max_num_seqs=8))
    engine = LLMEngine(sched, FakeRunner())
    for i in range(20):
        engine.add_request(make_seq(i, prompt_len=3 + i, max_tokens=1 + i % 5))
    tokens = run_to_end(engine)
    assert {k: len(v) for k, v in tokens.items()} == {f"r{i}": 1 + i % 5 for i in range(20)}
    assert sched.block_manager.num_used_blocks == 0


def test_max_num_seqs_limits_running():
    sched = Scheduler(SchedulerConfig(num_blocks=256, block_size=4, max_num_seqs=3))
    for i in range(5):
        sched.add(make_seq(i))
    batch = sched.schedule()
    assert len(batch.prefill) == 3 and sched.num_running == 3 and sched.num_waiting == 2


def test_chunked_prefill_respects_budget_and_decodes_go_first():
    budget = 16
    sched = Scheduler(SchedulerConfig(num_blocks=256, block_size=4, chunked_prefill_tokens=budget))
    runner = FakeRunner()
    engine = LLMEngine(sched, runner)
    engine.add_request(make_seq(0, prompt_len=5, max_tokens=30))
    engine.step()
    engine.add_request(make_seq(1, prompt_len=40, max_tokens=2))
    engine.add_request(make_seq(2, prompt_len=9, max_tokens=2))
    run_to_end(engine)
    mixed = [b for b in runner.batches if b.decode and b.prefill]
    assert mixed, "decodes and prefill chunks should share steps"
    for b in runner.batches:
        assert b.num_tokens <= budget
    # r1's 40-token prompt is split into chunks that tile it exactly.
    starts = [(c.start, c.num_tokens) for b in runner.batches for c in b.prefill
              if c.seq.seq_id == "r1"]
    assert len(starts) > 2 and starts[0][0] == 0
    assert all(a + n == b for (a, n), (b, _) in zip(starts, starts[1:]))
    assert starts[-1][0] + starts[-1][1] == 40


def test_chunked_decodes_are_all_scheduled_before_prefill():
    sched = Scheduler(SchedulerConfig(num_blocks=256, block_size=4, chunked_prefill_tokens=8))
    engine = LLMEngine(sched, FakeRunner())
    for i in range(3):
        engine.add_request(make_seq(i, prompt_len=2, max_tokens=20))
    engine.step()  # the three 2-token prompts fit one step
    engine.add_request(make_seq(9, prompt_len=30, max_tokens=2))
    _, record = engine.step()
    assert record.num_decode_seqs == 3 and record.num_prefill_tokens == 5


def test_preemption_when_blocks_run_out_and_all_still_finish():
    # 12 blocks of 4 slots: 6 requests of 8 + 15 tokens cannot all hold their KV at once.
    for chunk in (None, 8):
        sched = Scheduler(SchedulerConfig(num_blocks=12, block_size=4,
                                          chunked_prefill_tokens=chunk))
        runner = FakeRunner(token_id=EOS)  # ignore_eos: EOS must not stop them
        engine = LLMEngine(sched, runner)
        for i in range(6):
            engine.add_request(make_seq(i, prompt_len=8, max_tokens=16))
        tokens = run_to_end(engine)
        assert sum(len(b.preempted) for b in runner.batches) > 0
        assert all(len(tokens[f"r{i}"]) == 16 for i in range(6))
        assert sched.block_manager.num_used_blocks == 0


def test_preempted_sequence_is_recomputed_from_scratch():
    sched = Scheduler(SchedulerConfig(num_blocks=4, block_size=4))
    runner = FakeRunner()
    engine = LLMEngine(sched, runner)
    engine.add_request(make_seq(0, prompt_len=4, max_tokens=9))
    engine.add_request(make_seq(1, prompt_len=4, max_tokens=9))
    while not any(b.preempted for b in runner.batches):
        engine.step()
    victim = runner.batches[-1].preempted[0]
    assert victim.seq_id == "r1"  # the newest
    assert victim.num_computed_tokens == 0 and victim.block_table == []
    assert sched.waiting[0] is victim and victim.status is SeqStatus.WAITING
    run_to_end(engine)
    # Its re-prefill covered prompt and the tokens generated before preemption.
    re_prefill = [c for b in runner.batches for c in b.prefill if c.seq is victim][-1]
    assert re_prefill.start == 0 and re_prefill.num_tokens > 4


def test_eos_and_stop_tokens_finish_with_stop():
    sched = Scheduler(SchedulerConfig(num_blocks=64, block_size=4, eos_token_id=EOS))
    engine = LLMEngine(sched, FakeRunner(token_id=EOS))
    engine.add_request(Sequence("a", [5, 6], SamplingParams(max_tokens=8)))
    events, _ = engine.step()
    assert events[0].finished and events[0].finish_reason == "stop"
    sched.add(Sequence("b", [5], SamplingParams(max_tokens=8, ignore_eos=True,
                                                 stop_token_ids=(EOS,))))
    events, _ = engine.step()
    assert events[0].finish_reason == "stop"
    assert sched.block_manager.num_used_blocks == 0


def test_abort_frees_blocks():
    sched = Scheduler(SchedulerConfig(num_blocks=64, block_size=4))
    engine = LLMEngine(sched, FakeRunner())
    engine.add_request(make_seq(0, max_tokens=10))
    engine.step()
    assert sched.abort("r0") and not sched.abort("r0")
    assert sched.block_manager.num_used_blocks == 0 and not engine.has_unfinished()
    assert engine.step() == ([], None)


def test_request_that_can_never_fit_is_rejected():
    sched = Scheduler(SchedulerConfig(num_blocks=2, block_size=4))
    with pytest.raises(ValueError, match="KV blocks"):
        sched.add(make_seq(0, prompt_len=8, max_tokens=4))


def test_prefill_and_decode_roles_hand_over():
    prefill = Scheduler(SchedulerConfig(num_blocks=32, block_size=4, role="prefill",
                                        chunked_prefill_tokens=6))
    decode = Scheduler(SchedulerConfig(num_blocks=16, block_size=4, role="decode"))
    p_engine = LLMEngine(prefill, FakeRunner(token_id=3))
    d_engine = LLMEngine(decode, FakeRunner(token_id=4))
    for i in range(4):
        p_engine.add_request(make_seq(i, prompt_len=5, max_tokens=6))
    with pytest.raises(ValueError):
        decode.add(make_seq(9))

    tokens: dict[str, list[int]] = {}
    queue: list[Sequence] = []
    while p_engine.has_unfinished() or d_engine.has_unfinished() or queue:
        for engine in (p_engine, d_engine):
            events, record = engine.step()
            if record is not None and engine is p_engine:
                assert record.num_decode_seqs == 0
            for e in events:
                tokens.setdefault(e.seq_id, []).append(e.token_id)
        for seq in prefill.pop_prefilled():
            assert seq.is_prefill_done and seq.num_computed_tokens == 5
            assert len(seq.block_table) == 2  # still held for the KV export
            prefill.release(seq)
            queue.append(seq)
        queue = [s for s in queue if not decode.add_prefilled(s)]
    assert tokens == {f"r{i}": [3] + [4] * 5 for i in range(4)}
    assert prefill.block_manager.num_used_blocks == 0
    assert decode.block_manager.num_used_blocks == 0


def test_add_prefilled_returns_false_without_room():
    decode = Scheduler(SchedulerConfig(num_blocks=3, block_size=4, role="decode"))
    seqs = [Sequence.from_prefilled(f"d{i}", [1] * 7, 9, SamplingParams(max_tokens=4))
            for i in range(2)]
    assert decode.add_prefilled(seqs[0])
    assert not decode.add_prefilled(seqs[1])
    assert seqs[1].block_table == [] and decode.num_running == 1


def test_step_record_with_a_virtual_clock():
    now = [0.0]

    class ClockedRunner(FakeRunner):
        def run(self, batch):
            now[0] += 0.001 * batch.num_tokens
            return super().run(batch)

    sched = Scheduler(SchedulerConfig(num_blocks=64, block_size=4))
    engine = LLMEngine(sched, ClockedRunner(), clock=lambda: now[0])
    engine.add_request(make_seq(0, prompt_len=10, max_tokens=2))
    _, rec = engine.step()
    assert rec.duration_s == pytest.approx(0.010) and rec.num_prefill_tokens == 10
    assert rec.kv_blocks_used == 3 and rec.kv_blocks_total == 64
    _, rec = engine.step()
    assert rec.num_decode_seqs == 1 and rec.num_decode_ctx_tokens == 11
    assert rec.num_decode_padded_tokens == 11 and rec.prefill_q_tokens2 == 0


def test_step_records_carry_padded_positions_and_prefill_q():
    sched = Scheduler(SchedulerConfig(num_blocks=64, block_size=4))
    engine = LLMEngine(sched, FakeRunner())
    engine.add_request(make_seq(0, prompt_len=10, max_tokens=3))
    engine.add_request(make_seq(1, prompt_len=3, max_tokens=3))
    _, rec = engine.step()  # both prompts in one prefill step
    assert rec.num_prefill_seqs == 2 and rec.prefill_q_tokens2 == 10 ** 2 + 3 ** 2
    _, rec = engine.step()  # contexts 11 and 4: one padded call reads 2 * 11
    assert rec.num_decode_ctx_tokens == 15 and rec.num_decode_padded_tokens == 22
