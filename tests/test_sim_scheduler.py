"""The simulator's SimScheduler (gpuprobe/sim/scheduler.py): its runs of identical decode
steps, taken at once and lazily, leave what single steps of the engine's own Scheduler (the
policy the server runs) leave, whatever reads the state and whenever."""
import pytest

from gpuprobe.engine import SamplingParams, Scheduler, SchedulerConfig, Sequence
from gpuprobe.sim.scheduler import SimScheduler, SimSequence

EOS = 2


def _decoding(sim: bool, num_blocks: int = 64, lengths=((5, 9), (7, 6), (3, 12)),
              **kw) -> Scheduler:
    """A scheduler whose sequences have all been prefilled (one prefill-first step) and now
    only decode: SimScheduler with SimSequences (sim) or the engine's Scheduler."""
    cls, seq_cls = (SimScheduler, SimSequence) if sim else (Scheduler, Sequence)
    sched = cls(SchedulerConfig(num_blocks=num_blocks, block_size=4, **kw))
    for i, (prompt, out) in enumerate(lengths):
        sched.add(seq_cls(f"r{i}", [10 + i] * prompt, SamplingParams(max_tokens=out,
                                                                     ignore_eos=True)))
    _single(sched, 1)
    return sched


def _single(sched: Scheduler, steps: int, token: int = 7) -> None:
    for _ in range(steps):
        batch = sched.schedule()
        sched.postprocess(batch, {**{c.seq.seq_id: token for c in batch.prefill},
                                  **{s.seq_id: token for s in batch.decode}})


def _seen(seqs: list, sched: Scheduler) -> list:
    """Everything the public API shows of the KV pool and the sequences (pool first: reading
    a sequence settles it)."""
    return [sched.block_manager.num_free_blocks, sched.block_manager.usage,
            len(sched.running)] + [
        (s.seq_id, s.num_tokens, s.num_computed_tokens, s.token_ids, s.last_token_id,
         len(s.block_table), s.is_prefill_done, s.status, s.finish_reason) for s in seqs]


def test_advance_decodes_equals_single_steps_up_to_the_first_finish():
    fast, slow = _decoding(True), _decoding(False)
    k, ctx = fast.uniform_decode_steps(7)
    assert k == 5  # r1 has 5 of its 6 tokens left: it finishes on the 5th step
    assert ctx == sum(s.num_computed_tokens + 1 for s in fast.running)
    seqs = list(fast.running)
    finished = fast.advance_decodes(k, 7)
    _single(slow, k)
    assert [s.seq_id for s in finished] == ["r1"] and finished[0].finish_reason == "length"
    assert all(s.is_finished == (s.seq_id == "r1") for s in seqs)
    # A step the scheduler takes itself ends the run first: the next run counts from there.
    _single(fast, 1)
    _single(slow, 1)
    k, ctx = fast.uniform_decode_steps(7)
    assert k > 0 and ctx == sum(s.num_computed_tokens + 1 for s in slow.running)
    assert _seen(fast.running, fast) == _seen(slow.running, slow) and len(fast.running) == 2


def test_advance_decodes_wants_a_fresh_plan():
    sched = _decoding(True)
    with pytest.raises(ValueError):
        sched.advance_decodes(1, 7)
    k, _ = sched.uniform_decode_steps(7)
    with pytest.raises(ValueError):
        sched.advance_decodes(k + 1, 7)
    sched.uniform_decode_steps(7)
    _single(sched, 1)  # a step taken since: the plan is out of date
    with pytest.raises(ValueError):
        sched.advance_decodes(1, 7)
    sched.uniform_decode_steps(7)
    sched.add(SimSequence("new", [3] * 4, SamplingParams()))  # so is it after an addition
    with pytest.raises(ValueError):
        sched.advance_decodes(1, 7)


def test_no_uniform_run_when_the_next_step_differs():
    sched = _decoding(True)
    sched.add(SimSequence("new", [3] * 4, SamplingParams()))
    assert sched.uniform_decode_steps(7) == (0, 0)  # a prompt waits: prefill-first admits it
    assert _decoding(True, chunked_prefill_tokens=2).uniform_decode_steps(7)[0] == 0  # budget
    stops = _decoding(True, eos_token_id=EOS, lengths=((5, 9),))
    stops.running[0].params = SamplingParams(max_tokens=9)  # EOS would stop it now
    assert stops.uniform_decode_steps(EOS)[0] == 0
    # The engine's own Sequences have no room for a run's bookkeeping: never taken lazily.
    plain = SimScheduler(SchedulerConfig(num_blocks=64, block_size=4))
    plain.add(Sequence("p", [3] * 4, SamplingParams(max_tokens=9, ignore_eos=True)))
    _single(plain, 1)
    assert plain.uniform_decode_steps(7) == (0, 0)


def test_uniform_run_stops_before_a_preemption():
    # 3 prompts of 3 tokens, 6 blocks of 4: the 2nd step fills the cache, the 6th preempts.
    lengths = ((3, 20), (3, 20), (3, 20))
    sched, slow = _decoding(True, 6, lengths), _decoding(False, 6, lengths)
    k, _ = sched.uniform_decode_steps(7)
    assert k == 5
    for _ in range(k):
        batch = slow.schedule()
        assert not batch.preempted
        slow.postprocess(batch, {s.seq_id: 7 for s in batch.decode})
    sched.advance_decodes(k, 7)
    assert _seen(sched.running, sched) == _seen(slow.running, slow)
    assert slow.schedule().preempted  # one more step would preempt


def test_lazy_decode_runs_show_single_step_state_to_every_reader():
    lengths = ((5, 10), (7, 7), (3, 13))
    fast, slow = _decoding(True, lengths=lengths), _decoding(False, lengths=lengths)
    seqs_f, seqs_s = list(fast.running), list(slow.running)
    done = 0
    for steps, read in ((2, False), (3, True), (1, True), (3, False), (2, True)):
        k, _ = fast.uniform_decode_steps(7)
        assert k >= steps
        fast.advance_decodes(steps, 7)
        _single(slow, steps)
        done += steps
        if read:  # a read mid-run settles what is owed; the run goes on afterwards
            assert _seen(seqs_f, fast) == _seen(seqs_s, slow), done
    # A step the scheduler takes itself (another token) settles the rest first.
    _single(fast, 1, token=8)
    _single(slow, 1, token=8)
    assert _seen(seqs_f, fast) == _seen(seqs_s, slow)
    assert seqs_f[0].completion_token_ids == [7] * 10 and seqs_f[1].finish_reason == "length"
    assert seqs_f[2].completion_token_ids == [7] * 12 + [8]


def test_a_sequence_read_mid_run_shows_its_single_step_state():
    # One member read through its own counters (not the pool): settled alone, and the run,
    # which it stays in, goes on to the same end.
    fast, slow = _decoding(True), _decoding(False)
    fast.uniform_decode_steps(7)
    fast.advance_decodes(3, 7)
    _single(slow, 3)
    assert fast.running[2].num_computed_tokens == slow.running[2].num_computed_tokens
    assert fast.running[2].completion_token_ids == slow.running[2].completion_token_ids
    k, _ = fast.uniform_decode_steps(7)
    fast.advance_decodes(k, 7)
    _single(slow, k)
    assert _seen(fast.running, fast) == _seen(slow.running, slow)


def test_admission_and_abort_during_a_lazy_run_match_single_steps():
    # 40 blocks of 4, 8 in use after 4 steps: a 124-token prompt (31 blocks) fits only once
    # the owed blocks are counted exactly (the bound says no), which settles the run first;
    # a 132-token one waits.
    lengths = ((5, 10), (7, 7), (3, 13))
    for prompt in (8, 124, 132):
        fast, slow = _decoding(True, 40, lengths), _decoding(False, 40, lengths)
        fast.uniform_decode_steps(7)
        fast.advance_decodes(4, 7)
        _single(slow, 4)
        fast.add(SimSequence("new", [3] * prompt, SamplingParams(max_tokens=5)))
        slow.add(Sequence("new", [3] * prompt, SamplingParams(max_tokens=5)))
        _single(fast, 2)
        _single(slow, 2)
        assert _seen(list(fast.running), fast) == _seen(list(slow.running), slow), prompt
        k, _ = fast.uniform_decode_steps(7)
        if k:
            fast.advance_decodes(1, 7)
            _single(slow, 1)
        assert fast.abort("r0") and slow.abort("r0")
        assert _seen(list(fast.running), fast) == _seen(list(slow.running), slow), prompt


@pytest.mark.parametrize("prompt", [9, 13, 17])
def test_a_decode_worker_takes_handed_over_sequences_during_a_run(prompt):
    # add_prefilled() while the run owes blocks: 14 blocks of 4, three members owing 6 steps
    # (at most 6 blocks by the bound; 9 free before they take them, 4 after). A 9-token
    # prompt needs 3 (the bound says yes), a 13-token one 4 (only an exact count, settling
    # the run, says yes), a 17-token one 5 (no).
    def worker(sim: bool) -> Scheduler:
        cls, seq_cls = (SimScheduler, SimSequence) if sim else (Scheduler, Sequence)
        sched = cls(SchedulerConfig(num_blocks=14, block_size=4, role="decode"))
        for i, n in enumerate((5, 7, 3)):
            assert sched.add_prefilled(seq_cls.from_prefilled(
                f"r{i}", [1] * n, 7, SamplingParams(max_tokens=20, ignore_eos=True)))
        return sched

    fast, slow = worker(True), worker(False)
    assert fast.uniform_decode_steps(7)[0] >= 6
    fast.advance_decodes(6, 7)
    _single(slow, 6)
    got = [sched.add_prefilled(cls.from_prefilled("late", [1] * prompt, 7,
                                                  SamplingParams(max_tokens=3)))
           for sched, cls in ((fast, SimSequence), (slow, Sequence))]
    assert got == [prompt < 17] * 2
    assert _seen(fast.running, fast) == _seen(slow.running, slow)
