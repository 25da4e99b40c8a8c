"""Macro-steps: a SimEngine's runs of identical decode steps, taken at once.

When the SimScheduler says the next k steps are the same all-decode batch
(uniform_decode_steps), the worker takes as many of them as end before its next input is due,
in one go (advance_decodes): the loop below only adds up the clock, with the step-time formula's
own operations in its order, and records where each macro-step started; timeline.macro_ends
rebuilds every step's end from that afterwards. engine.SimEngine.run calls it.
"""
from __future__ import annotations

from collections import deque

TOKEN = 1  # every simulated token; the trace fixes lengths (ignore_eos)


def macro_chain(eng, pending: deque, min_macro: int):
    """macro_steps(t, next_s, k, C) -> clock: macro-steps from clock t, the first of up to
    k uniform decode steps (C: its first step's KV positions), while nothing else could come
    between them (the run loop would plan the next at once: no input or burst due, none
    pending). Each stops after the first step that ends at or after next_s (the next input
    joins before the step after it). Each step's time == step_s(0, 0, B, c), bit for bit.
    Padded or not, every sequence moves one position a step: c grows by B a step.
    A closure, built once a run: what it reads is bound here, not at each call."""
    dec = eng._dec
    run, plain, close = eng.sched.decode_run, eng._plain, eng._close
    plan, advance, running = run.plan, run.advance, eng.sched.running
    max_ctx = run.max_ctx if eng._padded else None
    m_first, m_len, m_t0 = eng.macro_first.append, eng.macro_len.append, eng.macro_t0.append
    m_seqs, m_ctx, m_chain = eng.macro_seqs.append, eng.macro_ctx.append, eng.chain_starts.append

    def macro_steps(t: float, next_s: float, k: int, C: int) -> float:
        n, m, chain_end, uniform = (eng.num_steps, eng.num_macro_steps, eng._chain_end,
                                    eng.num_uniform)
        d0, d1, d2, ovh, scale = dec  # locals: the step loop below reads them at every step
        while True:
            B = len(running)
            if max_ctx is not None:
                C = B * max_ctx()
            x = d0 + d1 * B
            t0 = t
            if plain:
                for c in range(C, C + k * B, B):
                    t += x + d2 * c
                    if t >= next_s:
                        break
            else:
                for c in range(C, C + k * B, B):
                    t += (x + d2 * c + ovh) * scale
                    if t >= next_s:
                        break
            K = (c - C) // B + 1
            if t0 != chain_end:  # something moved the clock since the last one
                m_chain(m)
            chain_end = t
            eng.busy_s += t - t0
            finished = advance(K, TOKEN)  # == advance_decodes()
            m_first(n)
            m_len(K)
            m_t0(t0)
            m_seqs(B)
            m_ctx(C)
            uniform += K
            if finished:
                eng.num_uniform = uniform  # _close reads it
                for seq in finished:
                    close(seq.seq_id)
            n += K
            m += 1
            if B > eng.max_decode_seqs:
                eng.max_decode_seqs = B
            if t >= next_s or pending:
                break
            k, C = plan(TOKEN)
            if k < min_macro:  # the run loop plans again, and takes a single step
                break
        eng.num_steps, eng.num_macro_steps, eng._chain_end = n, m, chain_end
        eng.num_uniform = uniform
        return t
    return macro_steps
