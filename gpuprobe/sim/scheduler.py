"""The simulator's scheduler: the engine's Scheduler, plus runs of identical decode steps.

SimScheduler is the engine's policy unchanged (every decision is Scheduler's) with two
methods the simulator uses to skip the steps it can predict:

    k, ctx = sched.uniform_decode_steps(token_id)   # the next k steps are the same decodes
    finished = sched.advance_decodes(n, token_id)   # take n <= k of them at once

They are lazy (decode_run.LazyRun): the sequences, which must be SimSequences, owe the
steps taken, and are settled wherever the Scheduler reads them. That is where the Scheduler
says a subclass may step in: its block manager (KvPool: free blocks net of those the run
owes) and _schedule_decodes() (the run is settled before a step decodes); abort() settles
it too. Nothing else is overridden: the policy's admissions and steps are Scheduler's own
calls, at its own cost. (A prefill-first prefill worker's steps, where every step starts from
an empty pool, are taken without it: prefill_steps.py, compared with these in the tests.)
"""
from __future__ import annotations

from gpuprobe.engine.block_manager import BlockManager
from gpuprobe.engine.config import SchedulerConfig
from gpuprobe.engine.scheduler import Scheduler
from gpuprobe.engine.sequence import Sequence
from gpuprobe.sim.decode_run import LazyRun, SimSequence

__all__ = ["KvPool", "SimScheduler", "SimSequence"]


class KvPool(BlockManager):
    """A BlockManager whose counts include the blocks its scheduler's lazy run still owes."""

    run: LazyRun  # set by SimScheduler

    @property
    def num_free_blocks(self) -> int:
        self.run.settle_all()  # readers see what single steps would have left
        return len(self._free)

    def can_allocate(self, seq: Sequence, num_tokens: int) -> bool:
        # BlockManager.can_allocate()'s need (>= 0), checked against the run's owed blocks:
        # a bound first, exactly (settling the run) only when the bound says no.
        need = -(-(seq.num_computed_tokens + num_tokens) // self.block_size) - len(seq.block_table)
        if need < 0:  # noqa: PLR1730
            need = 0
        run = self.run
        return need <= len(self._free) if not run.members else run.fits(need)


class SimScheduler(Scheduler):
    """Scheduler with uniform_decode_steps() / advance_decodes() (module docstring)."""

    def __init__(self, config: SchedulerConfig):
        super().__init__(config)
        pool = self.block_manager = KvPool(config.num_blocks, config.block_size)
        self.decode_run = pool.run = LazyRun(self)

    def uniform_decode_steps(self, token_id: int) -> tuple[int, int]:
        """(k, ctx_tokens): the next k steps would each be the same batch, every running
        sequence decoding and nothing else, each sampling token_id, with no preemption; the
        first attends ctx_tokens KV positions, each later one len(running) more. k = 0 when
        the next step is not such a step. A finish (by length) ends the run on its k-th step.
        """
        return self.decode_run.plan(token_id)

    def advance_decodes(self, num_steps: int, token_id: int) -> list[Sequence]:
        """Do what num_steps rounds of schedule() and postprocess() would do, right after
        uniform_decode_steps(token_id) said k >= num_steps. Returns the sequences that finished
        (on the last step; retired like postprocess() retires them). No TokenEvents. Raises
        ValueError where the scheduler did anything else since that call."""
        return self.decode_run.advance(num_steps, token_id)

    def abort(self, seq_id: str) -> bool:
        self.decode_run.settle_all()
        return super().abort(seq_id)

    # The run is settled only where a step decodes (or an admission needs its blocks: KvPool).
    def _schedule_decodes(self, max_seqs: int) -> tuple[list[Sequence], list[Sequence]]:
        self.decode_run.settle_all()
        return Scheduler._schedule_decodes(self, max_seqs)  # (not super(): once per step)
