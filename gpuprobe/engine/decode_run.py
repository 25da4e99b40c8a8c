"""Runs of identical decode steps, planned and applied in one pass each (no per-step work).

When every running sequence is decoding and nothing else can happen (nothing waiting, no
prompt part-way, the sampled token stops no one, enough free KV blocks), the next steps are
the same batch over and over, each sequence one position further. The simulator advances
such a run with Scheduler.uniform_decode_steps() / advance_decodes(), built on these two
functions; the reference server never needs them. The block counts match k single steps
exactly; which free block ids a sequence gets can differ (nothing reads them in a run).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from gpuprobe.engine.sequence import Sequence

if TYPE_CHECKING:
    from gpuprobe.engine.scheduler import Scheduler

NEVER = 1 << 62


class DecodeRun:
    """A Scheduler's pending run: what plan() allowed, and what advance() found for the next
    plan (so a run that ends on a finish needs no second pass). drop() on any other change."""

    def __init__(self) -> None:
        self.allowed: tuple[int, int] | None = None     # (k, token_id)
        self.next: tuple[int, int, int] | None = None   # (k before fit_blocks, ctx, token_id)

    def drop(self) -> None:
        self.allowed = self.next = None

    def plan(self, sched: Scheduler, token_id: int) -> tuple[int, int]:
        nxt, self.next = self.next, None
        if nxt is not None and nxt[2] == token_id and sched.running:
            k, ctx = fit_blocks(sched, nxt[0]), nxt[1]
        else:
            k, ctx = plan(sched, token_id)
        self.allowed = (k, token_id) if k else None
        return k, ctx

    def advance(self, sched: Scheduler, k: int, token_id: int) -> list[Sequence]:
        allowed, self.allowed = self.allowed, None
        if allowed is None or allowed[1] != token_id or not 1 <= k <= allowed[0]:
            raise ValueError(f"advance_decodes({k}, {token_id}) wants a step count that "
                             f"uniform_decode_steps({token_id}) just allowed, got {allowed}")
        finished, k_next, ctx = advance(sched, k, token_id)
        self.next = (k_next, ctx, token_id)
        return finished


def plan(sched: Scheduler, token_id: int) -> tuple[int, int]:
    """(k, ctx_tokens): how many next steps are that same all-decode batch, and the KV
    positions its first step attends. k is 0 when the next step is not such a step; the k-th
    step is the first one that finishes a sequence (by length), if any does."""
    running, cfg = sched.running, sched.config
    B = len(running)
    if not B or sched.waiting or cfg.role == "prefill" or B > cfg.max_decode_seqs:
        return 0, 0
    eos = token_id == cfg.eos_token_id
    k, ctx = NEVER, B
    # Inlined Sequence properties: this loop runs once per simulated arrival and finish.
    for s in running:
        n, done, p = s.num_tokens, s.num_computed_tokens, s.params
        if done < n - 1 or n == s.num_prompt_tokens:
            return 0, 0  # a prompt still prefilling
        if token_id in p.stop_token_ids or (eos and not p.ignore_eos):
            return 0, 0  # it would stop after one step: let postprocess() decide
        left = p.max_tokens - n + s.num_prompt_tokens
        if left < k:
            k = left
        ctx += done
    if k <= 0:
        return 0, 0  # a sequence already past max_tokens: not for us to judge
    return fit_blocks(sched, k), ctx


def fit_blocks(sched: Scheduler, k: int) -> int:
    """The longest run, up to k steps, whose new KV blocks are free: no preemption in it."""
    running, bm = sched.running, sched.block_manager
    free = bm.num_free_blocks
    # Each sequence needs at most ceil(k / block_size) new blocks over k steps.
    if len(running) * -(-k // bm.block_size) <= free:
        return k
    lo, hi = 0, k  # blocks_needed grows with k
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if blocks_needed(running, mid, bm.block_size) <= free:
            lo = mid
        else:
            hi = mid - 1
    return lo


def blocks_needed(running: list[Sequence], k: int, block_size: int) -> int:
    """New KV blocks k more decode steps of every running sequence take."""
    need = 0
    for s in running:
        n = -(-(s.num_computed_tokens + k) // block_size) - len(s.block_table)
        if n > 0:
            need += n
    return need


def advance(sched: Scheduler, k: int, token_id: int) -> tuple[list[Sequence], int, int]:
    """Apply k planned steps: KV progress, tokens, blocks. Returns the sequences that reach
    max_tokens on the k-th step (in running order, still in sched.running) and, for the
    others, what plan() would say next before fit_blocks(): (finished, k_next, ctx_next).

    One loop that writes Sequence and BlockManager fields directly (both of this package):
    it runs for every running sequence at every simulated arrival and finish.
    """
    bm = sched.block_manager
    size, free = bm.block_size, bm._free
    tokens = [token_id] * k
    finished = []
    k_next, ctx = NEVER, 0
    for s in sched.running:
        done = s.num_computed_tokens = s.num_computed_tokens + k
        s._completion += tokens
        n = s.num_tokens = s.num_tokens + k
        table = s.block_table
        # The blocks k may_append() calls take; the ids come off the free stack in sequence
        # order rather than step order (nothing in a run reads them). plan() checked the count.
        grow = -(-done // size) - len(table)
        if grow == 1:
            table.append(free.pop())
        elif grow > 0:
            table += free[-grow:][::-1]  # as BlockManager.allocate() takes them
            del free[-grow:]
        left = s.params.max_tokens - n + s.num_prompt_tokens
        if left <= 0:
            finished.append(s)
            continue
        if left < k_next:
            k_next = left
        ctx += done + 1
    return finished, k_next, ctx
