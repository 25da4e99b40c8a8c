"""Scheduling policy: which sequences prefill or decode in the next step. Pure Python.

Two policies, chosen by SchedulerConfig.chunked_prefill_tokens:
- None: prefill-first (vLLM v0 / nano-vllm). Waiting prompts are prefilled whole; a step
  either prefills or decodes, never both.
- an int: chunked prefill (vLLM chunked prefill / Sarathi). Each step has that token budget;
  running decodes take it first and prefill chunks fill the rest.
KV blocks for a whole prompt are taken when it is admitted, so only decodes grow; when a
decode cannot get a block, the newest running sequence is preempted and recomputed later.

Extending it (the simulator's SimScheduler in gpuprobe/sim/scheduler.py does): every
admission asks `block_manager.can_allocate()`, and a step that decodes reads the running
sequences' progress first in `_schedule_decodes()`; so a subclass may give the scheduler a
BlockManager of its own and wrap that method, keeping the public methods' contracts.
"""

from __future__ import annotations

from collections import deque

from gpuprobe.engine.batch import Batch, PrefillChunk, TokenEvent  # re-exported
from gpuprobe.engine.block_manager import BlockManager
from gpuprobe.engine.config import ROLES, SchedulerConfig  # noqa: F401 (re-exported)
from gpuprobe.engine.sequence import SeqStatus, Sequence

FINISHED, RUNNING = SeqStatus.FINISHED, SeqStatus.RUNNING

class Scheduler:
    """Continuous batching over a BlockManager; see the module docstring for the policies."""

    def __init__(self, config: SchedulerConfig):
        self.config = config
        self.block_manager = BlockManager(config.num_blocks, config.block_size)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # admission order: newest last, preempted first
        self._prefilled: list[Sequence] = []  # role='prefill': done, blocks still held
        # Read per request (config is frozen): ceil(m / size) > num_blocks <=> m > this.
        self._max_positions = config.num_blocks * config.block_size
        self._role = config.role

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def has_unfinished(self) -> bool:
        """Whether any sequence waits or runs (handed-over prefilled ones do not count)."""
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        """Queue a new request (roles 'mixed' and 'prefill')."""
        role = self._role
        if role == "decode":
            raise ValueError("a decode-role scheduler takes sequences through add_prefilled()")
        # _check_fits()'s test, inlined (once per simulated request); it raises.
        if (seq.num_tokens if role == "prefill" else
                seq.num_prompt_tokens + seq.params.max_tokens - 1) > self._max_positions:
            self._check_fits(seq)
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def add_prefilled(self, seq: Sequence) -> bool:
        """Take a sequence prefilled elsewhere; allocate blocks for its computed tokens.

        Returns False, changing nothing, when there is no room now: the caller keeps it
        queued and tries again after a step. The caller then imports its KV into
        seq.block_table.
        """
        if self._role == "prefill":
            raise ValueError("a prefill-role scheduler does not decode")
        # is_prefill_done's and _check_fits()'s tests, inlined (once per simulated request on a
        # decode worker).
        n, done = seq.num_tokens, seq.num_computed_tokens
        if n == seq.num_prompt_tokens or done < n - 1 or seq.block_table:
            raise ValueError(f"{seq.seq_id}: add_prefilled wants a prefilled sequence "
                             f"released from its prefill scheduler, got {seq!r}")
        if seq.num_prompt_tokens + seq.params.max_tokens - 1 > self._max_positions:
            self._check_fits(seq)  # raises
        # Recomputing preempted sequences comes before taking new ones.
        if self.waiting or len(self.running) >= self.config.max_num_seqs:
            return False
        if not self.block_manager.can_allocate(seq, 1):  # its KV and the next decode's
            return False
        self.block_manager.allocate(seq, 0)
        seq.status = SeqStatus.RUNNING
        self.running.append(seq)
        return True

    def abort(self, seq_id: str) -> bool:
        """Drop a request wherever it is and free its blocks. Returns whether it was found."""
        for queue in (self.waiting, self.running, self._prefilled):
            for seq in queue:
                if seq.seq_id == seq_id:
                    queue.remove(seq)
                    self._retire(seq, "abort")
                    return True
        return False

    def pop_prefilled(self) -> list[Sequence]:
        """role='prefill': sequences whose prefill completed since the last call.

        Their blocks stay allocated so the caller can export the KV; then call release().
        """
        done, self._prefilled = self._prefilled, []
        return done

    def release(self, seq: Sequence) -> None:
        """Free the blocks of a handed-over sequence once its KV has been exported."""
        self.block_manager.deallocate(seq)

    def schedule(self) -> Batch:
        if self.config.chunked_prefill_tokens is None:
            return self._schedule_prefill_first()
        return self._schedule_chunked(self.config.chunked_prefill_tokens)

    def postprocess(self, batch: Batch, token_ids: dict[str, int]) -> list[TokenEvent]:
        """Advance KV progress after a step and append the sampled tokens.

        token_ids maps seq_id -> token for every decode seq and every last prefill chunk.
        Finished sequences free their blocks; sequences aborted meanwhile are skipped.
        """
        events = []
        for chunk in batch.prefill:
            seq = chunk.seq
            if seq.status is FINISHED:
                continue
            seq.num_computed_tokens = chunk.start + chunk.num_tokens
            if chunk.is_last:
                events.append(self._append(seq, token_ids[seq.seq_id]))
        for seq in batch.decode:
            if seq.status is FINISHED:
                continue
            seq.num_computed_tokens += 1
            events.append(self._append(seq, token_ids[seq.seq_id]))
        return events

    def _schedule_prefill_first(self) -> Batch:
        prefill = self._admit(self.config.max_num_batched_tokens, whole=True)
        if prefill or self.config.role == "prefill":
            return Batch(prefill=prefill)
        decode, preempted = self._schedule_decodes(self.config.max_num_seqs)
        return Batch(decode=decode, preempted=preempted)

    def _schedule_chunked(self, budget: int) -> Batch:
        decode, preempted = [], []
        if self.config.role != "prefill":
            decode, preempted = self._schedule_decodes(min(self.config.max_num_seqs, budget))
        budget -= len(decode)
        prefill = []
        for seq in self.running:  # prompts part-way through, oldest first
            if budget <= 0:
                break
            if not seq.is_prefill_done:
                n = min(seq.num_tokens - seq.num_computed_tokens, budget)
                prefill.append(PrefillChunk(seq, seq.num_computed_tokens, n))
                budget -= n
        # A step that just preempted has no blocks to spare for new prompts.
        if not preempted:
            prefill += self._admit(budget, whole=False)
        return Batch(prefill=prefill, decode=decode, preempted=preempted)

    def _admit(self, budget: int, whole: bool) -> list[PrefillChunk]:
        """Move waiting sequences to running, FCFS, taking blocks for their whole prompt.

        whole: prefill each prompt in one chunk; the first one may exceed the budget, so a
        prompt longer than it still runs (alone).
        """
        chunks: list[PrefillChunk] = []
        waiting, running = self.waiting, self.running  # never rebound
        max_seqs, bm = self.config.max_num_seqs, self.block_manager
        can_allocate, allocate = bm.can_allocate, bm.allocate
        while waiting and budget > 0 and len(running) < max_seqs:
            seq = waiting[0]
            remaining = seq.num_tokens - seq.num_computed_tokens
            n = remaining if whole else min(remaining, budget)
            if whole and chunks and n > budget:
                break
            if not can_allocate(seq, remaining):
                break
            allocate(seq, remaining)
            waiting.popleft()
            seq.status = RUNNING
            running.append(seq)
            chunks.append(PrefillChunk(seq, seq.num_computed_tokens, n))
            budget -= n
        return chunks

    def _schedule_decodes(self, max_seqs: int) -> tuple[list[Sequence], list[Sequence]]:
        """Up to max_seqs decodes, oldest first; preempt the newest when blocks run out."""
        decode: list[Sequence] = []
        preempted: list[Sequence] = []
        bm = self.block_manager
        # A copy: preemption below removes victims from self.running.
        for seq in self.running[:]:
            n = seq.num_tokens
            if n == seq.num_prompt_tokens or seq.num_computed_tokens < n - 1:
                continue  # not is_prefill_done: a prompt part-way (chunked prefill)
            if len(decode) >= max_seqs:
                break
            if seq.status is not SeqStatus.RUNNING:
                continue  # preempted above to make room for an older one
            while not bm.can_append(seq):
                victim = self._newest_unscheduled(decode)
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            else:
                bm.may_append(seq)
                decode.append(seq)
        return decode, preempted

    def _newest_unscheduled(self, scheduled: list[Sequence]) -> Sequence:
        taken = {id(s) for s in scheduled}
        return next(s for s in reversed(self.running) if id(s) not in taken)

    def _preempt(self, seq: Sequence) -> None:
        # Recompute, not swap: the KV is dropped and the whole token list prefilled again.
        self.running.remove(seq)
        self.block_manager.deallocate(seq)
        seq.num_computed_tokens = 0
        seq.status = SeqStatus.WAITING
        self.waiting.appendleft(seq)

    def _append(self, seq: Sequence, token_id: int) -> TokenEvent:
        seq.append_token(token_id)
        params, num_out = seq.params, seq.num_tokens - seq.num_prompt_tokens
        # The finish reason, inline (once per sampled token). Like vLLM: ignore_eos ignores
        # only EOS; explicit stop tokens still stop.
        if token_id in params.stop_token_ids or (
                not params.ignore_eos and token_id == self.config.eos_token_id):
            reason = "stop"
        elif num_out >= params.max_tokens:
            reason = "length"
        else:
            reason = None
        if reason is not None:
            self.running.remove(seq)
            self._retire(seq, reason)
        elif self._role == "prefill":
            self.running.remove(seq)
            self._prefilled.append(seq)
        return TokenEvent(seq.seq_id, token_id, num_out - 1, reason is not None, reason)

    def _retire(self, seq: Sequence, reason: str) -> None:
        self.block_manager.deallocate(seq)
        seq.status = SeqStatus.FINISHED
        seq.finish_reason = reason

    def _check_fits(self, seq: Sequence) -> None:
        # The longest KV a request can need: the last sampled token never gets KV.
        max_positions = seq.num_prompt_tokens + seq.params.max_tokens - 1
        if self.config.role == "prefill":
            max_positions = seq.num_tokens
        need = -(-max_positions // self.config.block_size)  # num_blocks_for(), inlined
        if need > self.config.num_blocks:
            raise ValueError(f"{seq.seq_id}: needs up to {need} KV blocks "
                             f"({max_positions} tokens), the cache has {self.config.num_blocks}")
