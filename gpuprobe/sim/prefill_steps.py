"""A prefill worker's steps, taken without the Scheduler's objects.

On a 'prefill' worker with the prefill-first policy every step starts from the same state:
nothing running and every KV block free, because each step prefills whole prompts and hands
them all off (or finishes them) at its end. So Scheduler.schedule() + postprocess() +
pop_prefilled() + release() reduce to: take waiting prompts first come first served while
the token budget, max_num_seqs and the free blocks allow (the first always runs), advance each
one's KV to its prompt's end and give it its first token. prefill_stepper() does exactly that
per step, without a Batch, PrefillChunk, TokenEvent or block id per request: the same
sequences end in the same state (block ids aside: none is held after a step either way).
The single-step baseline (MIN_MACRO_STEPS out of reach) keeps the Scheduler's path, and
tests/test_sim_equivalence.py compares the two.
"""
from __future__ import annotations

from gpuprobe.engine.sequence import SeqStatus

RUNNING, FINISHED = SeqStatus.RUNNING, SeqStatus.FINISHED


def prefill_stepper(eng, token: int):
    """step(t) -> clock after the step, or None when nothing waits: SimEngine._prefill_step's
    effects for eng (a 'prefill' SimEngine), or None where they differ (chunked prefill)."""
    cfg = eng.config
    if cfg.role != "prefill" or cfg.chunked_prefill_tokens is not None:
        return None
    waiting, popleft = eng.sched.waiting, eng.sched.waiting.popleft
    bs, num_blocks = cfg.block_size, cfg.num_blocks
    max_tokens, max_seqs, eos = cfg.max_num_batched_tokens, cfg.max_num_seqs, cfg.eos_token_id
    step_s, first_s = eng.step_s, eng.first_s
    prefilled, ready = eng.prefilled.append, eng.prefilled_s.append

    def step(t: float) -> float | None:
        # Scheduler._admit(whole=True) from an empty pool
        batch, budget, free, T, Q = [], max_tokens, num_blocks, 0, 0
        while waiting and budget > 0 and len(batch) < max_seqs:
            seq = waiting[0]
            n, start = seq.num_tokens, seq.num_computed_tokens
            todo = n - start
            if batch and todo > budget:
                break
            need = -(-n // bs) - len(seq.block_table)
            if need > free:
                break
            free -= need if need > 0 else 0
            popleft()
            batch.append(seq)
            budget -= todo
            T += todo
            Q += n * n - start * start
        if not batch:
            return None
        dt = step_s(T, Q, 0, 0, len(batch))
        t += dt
        eng.busy_s += dt
        eng.num_steps += 1
        if T > eng.max_prefill_tokens:
            eng.max_prefill_tokens = T
        # postprocess(): each prompt's KV done and its first token (Scheduler._append), then
        # pop_prefilled() and release(): the unfinished ones handed off, no block kept
        for seq in batch:
            seq.num_computed_tokens = seq.num_tokens
            seq.append_token(token)
            seq.block_table = []
            params = seq.params
            if token in params.stop_token_ids or (not params.ignore_eos and token == eos):
                seq.status, seq.finish_reason = FINISHED, "stop"
            elif seq.num_tokens - seq.num_prompt_tokens >= params.max_tokens:
                seq.status, seq.finish_reason = FINISHED, "length"
            else:
                seq.status = RUNNING
                prefilled(seq)
                ready(t)
            first_s[seq.seq_id] = t
        return t
    return step
