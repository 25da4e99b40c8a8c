"""Runs of identical decode steps, taken lazily: nothing per step, O(log B) per finish.

When every running sequence is decoding and nothing else can happen (nothing waiting, no
prompt part-way, the sampled token stops no one, enough free KV blocks), the next steps are
the same batch over and over, each sequence one position further. The simulator's
SimScheduler (scheduler.py) advances such a run with uniform_decode_steps() /
advance_decodes(); the engine's Scheduler, which the reference server runs, knows nothing of it.

Lazy: the running sequences that joined the run (a prefix of the scheduler's running list;
newcomers are appended) owe the steps taken since they joined or were last settled: one global
step count, a base step per sequence, a heap of finish steps. advance() only moves the count
and settles the sequences that finish. Only SimSequences join (their two extra slots hold a
member's run and base step). Owing members have class Owing, whose counters, token list and
block table settle the sequence before any read or write, and the SimScheduler's block manager
settles every member before it counts free blocks; so whatever reads state through the public
API sees what single steps would have left. The block counts match single steps exactly;
which free block ids a sequence gets can differ (nothing reads them in a run). A member's
params are read once, when it joins.
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from gpuprobe.engine.sequence import Sequence

if TYPE_CHECKING:
    from gpuprobe.sim.scheduler import SimScheduler


class SimSequence(Sequence):
    """A simulated request: a Sequence that can join a LazyRun. _lazy: the run it owes steps
    to (Owing), or the token its untaken completion tokens repeat (Pending); _lazy_base: the
    run's step count when it last settled (Owing), or how many tokens it lacks (Pending)."""

    __slots__ = ("_lazy", "_lazy_base")


class Owing(SimSequence):
    """A running SimSequence that may owe decode steps to its scheduler's LazyRun (seq._lazy)."""

    __slots__ = ()


def _settling(name: str) -> property:
    slot = Sequence.__dict__[name]  # the base class's slot descriptor

    def get(seq):
        seq._lazy.settle(seq)
        return slot.__get__(seq)

    def set_(seq, value):
        seq._lazy.settle(seq)
        slot.__set__(seq, value)
    return property(get, set_)


for _name in ("num_tokens", "num_computed_tokens", "block_table", "_completion"):
    setattr(Owing, _name, _settling(_name))


class Pending(SimSequence):
    """A SimSequence that left a run with its last seq._lazy_base completion tokens (each
    seq._lazy) not yet in its token list: the list is filled on first use. A simulated
    request's tokens are never read, and 4 M of them per hour of trace cost ~10% to build."""

    __slots__ = ()


def _fill(seq):
    seq.__class__ = SimSequence
    seq._completion += [seq._lazy] * seq._lazy_base
    seq._lazy = None
    return seq._completion


def _replace(seq, value):
    seq.__class__ = SimSequence
    seq._lazy = None
    seq._completion = value


Pending._completion = property(_fill, _replace)


class LazyRun:
    """A SimScheduler's lazy decode run: see the module docstring. allowed: what the last plan()
    allowed advance() to take, (k, token_id); advance() also refuses it once the scheduler
    has moved on (a sequence waiting or running outside the run, as any step, addition or
    settling read leaves it)."""

    def __init__(self, sched: SimScheduler):
        self.sched = sched
        # Never rebound by the scheduler or its block manager: read once, plan() runs at every
        # simulated event.
        self._running, self._waiting = sched.running, sched.waiting
        self._free = sched.block_manager._free
        cfg = sched.config  # frozen
        self.max_seqs = 0 if cfg.role == "prefill" else cfg.max_decode_seqs
        self.block_size = cfg.block_size
        self.allowed: tuple[int, int] | None = None
        self.token_id: int | None = None  # what every owed step sampled
        self.members = 0     # sched.running[:members] joined the run
        self.step = 0        # steps taken lazily so far (a member owes step - its base)
        self.sum_base = 0    # of the members' base steps
        self.sum_done = 0    # of the members' num_computed_tokens as last settled
        self.finishes: list[tuple[int, int, SimSequence]] = []  # (finish step, order, seq)
        self.order = 0
        # track_max (set by a simulator whose cost model pads the decodes' attention to the
        # longest context): the members' longest context, lazily. A member's KV progress less
        # its base step is fixed while it is a member (settling adds the same to both), so the
        # longest context is the largest such key plus the step count: a heap of keys, and
        # how many members hold each (a key whose count fell to 0 is popped when read).
        self.track_max = False
        self._keys: list[int] = []          # -key, a heap
        self._key_count: dict[int, int] = {}

    def owed_blocks_bound(self) -> int:
        """At least the KV blocks the members still owe: owing o steps takes at most
        ceil(o / size) <= (o + size - 1) / size of them."""
        size = self.block_size
        B = self.members
        return (B * self.step - self.sum_base + B * (size - 1)) // size if B else 0

    def fits(self, num_blocks: int) -> bool:
        """Whether num_blocks more are free once the members take what they owe: a bound
        first (no settling), exactly (settling the run) when the bound says no."""
        free, B = self._free, self.members
        size = self.block_size  # owed_blocks_bound() inlined: once per admission
        if num_blocks <= len(free) - ((B * self.step - self.sum_base + B * (size - 1)) // size
                                      if B else 0):
            return True
        self.settle_all()
        return num_blocks <= len(free)

    def plan(self, token_id: int) -> tuple[int, int]:
        """(k, ctx_tokens) of SimScheduler.uniform_decode_steps()."""
        self.allowed = None
        running = self._running
        B = len(running)
        if not B or B > self.max_seqs or self._waiting:
            return 0, 0
        if token_id != self.token_id:
            self.settle_all()
            self.token_id = token_id
        if self.members < B and not self._join(running[self.members:]):
            return 0, 0
        step, size = self.step, self.block_size
        k = self.finishes[0][0] - step
        # Each member needs at most ceil(k / size) new blocks over k steps (owed_blocks_bound
        # inlined: this runs at every simulated event).
        if B * -(-k // size) > (len(self._free)
                                - (B * step - self.sum_base + B * (size - 1)) // size):
            k = self._fit_blocks(k)
            if not k:
                return 0, 0
        self.allowed = (k, token_id)
        return k, B + self.sum_done + B * step - self.sum_base

    def max_ctx(self) -> int:
        """The longest context (KV progress + 1) of the running sequences, right after plan()
        said k > 0 (every running sequence is then a member). Needs track_max."""
        keys, count = self._keys, self._key_count
        while not count.get(-keys[0]):
            heapq.heappop(keys)
        return self.step + 1 - keys[0]

    def advance(self, k: int, token_id: int) -> list[Sequence]:
        """SimScheduler.advance_decodes(): take k planned steps; returns the members that finish
        on the k-th (join order, which is running order), settled, no longer members, and
        retired as postprocess() retires them. The simulator calls this directly: one call
        layer less per macro-step."""
        allowed, self.allowed = self.allowed, None
        # plan() said k > 0 only with every running sequence a member and none waiting; a
        # sequence added since, a step taken or a settling read breaks that.
        if (allowed is None or allowed[1] != token_id or not 1 <= k <= allowed[0]
                or self._waiting or len(self._running) != self.members):
            raise ValueError(f"advance_decodes({k}, {token_id}) wants a step count that "
                             f"uniform_decode_steps({token_id}) just allowed, got {allowed}")
        step = self.step = self.step + k
        heap = self.finishes
        if not heap or heap[0][0] > step:  # no member finishes: the run goes on
            return []
        finished = []
        while heap and heap[0][0] <= step:
            seq = heapq.heappop(heap)[2]
            self._leave(seq)
            finished.append(seq)
        running, retire = self._running, self.sched._retire
        for seq in finished:  # after every one left: the free-block order of before
            running.remove(seq)
            retire(seq, "length")
        return finished

    def _join(self, newcomers: list[Sequence]) -> bool:
        """Make newcomers members, in order, while each is decoding and runs at least a step."""
        eos = self.token_id == self.sched.config.eos_token_id
        step, token_id = self.step, self.token_id
        for s in newcomers:
            n, done, p = s.num_tokens, s.num_computed_tokens, s.params
            if done < n - 1 or n == s.num_prompt_tokens:
                return False  # a prompt still prefilling
            if token_id in p.stop_token_ids or (eos and not p.ignore_eos):
                return False  # it would stop after one step: let postprocess() decide
            left = p.max_tokens - n + s.num_prompt_tokens
            if left <= 0:
                return False  # already past max_tokens: not for us to judge
            if s.__class__ is not SimSequence:
                if s.__class__ is not Pending:
                    return False  # not ours: an engine Sequence has no slots for a run
                _fill(s)  # its tokens from an earlier run
            heapq.heappush(self.finishes, (step + left, self.order, s))
            self.order += 1
            if self.track_max:
                key = done - step
                count = self._key_count
                if not count.get(key):
                    heapq.heappush(self._keys, -key)
                count[key] = count.get(key, 0) + 1
            s._lazy, s._lazy_base = self, step
            s.__class__ = Owing
            self.sum_done += done
            self.sum_base += step
            self.members += 1
        return True

    def _fit_blocks(self, k: int) -> int:
        """The longest run, up to k steps, whose new KV blocks are free: no preemption. For
        when the bound in plan() does not prove k steps fit."""
        bm = self.sched.block_manager
        self.settle_all()  # tight: count exactly, then join again (nothing owed)
        running = self.sched.running
        lo, hi = 0, k  # blocks_needed grows with k
        if len(running) * -(-k // self.block_size) <= len(bm._free):
            lo = k
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if blocks_needed(running, mid, bm.block_size) <= len(bm._free):
                lo = mid
            else:
                hi = mid - 1
        self._join(running)
        return lo

    def settle(self, seq: Sequence) -> None:
        """Apply the steps seq owes; it stays a member."""
        owed = self.step - seq._lazy_base
        if owed:
            seq.__class__ = SimSequence
            _apply(seq, owed, self.sched.block_manager)
            seq._completion += [self.token_id] * owed
            seq.__class__ = Owing
            seq._lazy_base = self.step
            self.sum_base += owed
            self.sum_done += owed

    def _leave(self, seq: Sequence) -> None:
        base = seq._lazy_base
        owed = self.step - base
        seq.__class__ = SimSequence
        self.sum_base -= base
        self.sum_done -= seq.num_computed_tokens
        self.members -= 1
        if self.track_max:
            self._key_count[seq.num_computed_tokens - base] -= 1
        if owed:
            _apply(seq, owed, self.sched.block_manager)
            seq._lazy, seq._lazy_base = self.token_id, owed
            seq.__class__ = Pending
        else:
            seq._lazy = None

    def settle_all(self) -> None:
        """Settle every member and end the run (the scheduler is about to read them all)."""
        if not self.members:
            return
        for s in self.sched.running[:self.members]:
            self._leave(s)
        self.finishes, self.sum_base, self.sum_done, self.allowed = [], 0, 0, None
        self._keys, self._key_count = [], {}


def _apply(s: Sequence, k: int, bm) -> None:
    """What k decode steps do to a SimSequence (of that class, not Owing), its token list
    aside: KV progress, token count and the blocks k may_append() calls take (ids off the
    free stack as allocate() takes them)."""
    done = s.num_computed_tokens = s.num_computed_tokens + k
    s.num_tokens += k
    table, free = s.block_table, bm._free
    grow = -(-done // bm.block_size) - len(table)
    if grow == 1:
        table.append(free.pop())
    elif grow > 0:
        table += free[-grow:][::-1]
        del free[-grow:]


def blocks_needed(running: list[Sequence], k: int, block_size: int) -> int:
    """New KV blocks k more decode steps of every running sequence take."""
    need = 0
    for s in running:
        n = -(-(s.num_computed_tokens + k) // block_size) - len(s.block_table)
        if n > 0:
            need += n
    return need
