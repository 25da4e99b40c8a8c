"""The step loop: schedule, run the batch, postprocess; one StepRecord per step."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol

from gpuprobe.engine.scheduler import Batch, Scheduler, TokenEvent
from gpuprobe.engine.sequence import Sequence


@dataclass(frozen=True)
class StepRecord:
    """What one engine step did and how long it took (seconds on the engine's clock)."""

    start_s: float
    duration_s: float
    role: str
    num_prefill_seqs: int
    num_prefill_tokens: int
    num_decode_seqs: int
    num_decode_ctx_tokens: int  # KV positions attended by the decodes, summed
    num_decode_padded_tokens: int  # ... padded to the longest: what the runner's call reads
    prefill_q_tokens2: int  # Q of the prefill chunks (Batch.prefill_attn_work)
    kv_blocks_used: int
    kv_blocks_total: int
    num_preempted: int


class Runner(Protocol):
    """Runs a batch and returns the sampled token per seq_id that produces one.

    The model runner does real forward passes; a simulator's runner advances a virtual clock.
    """

    def run(self, batch: Batch) -> dict[str, int]: ...


class LLMEngine:
    """Drives a Scheduler with a Runner. `clock` returns seconds (virtual in the simulator)."""

    def __init__(self, scheduler: Scheduler, runner: Runner,
                 clock: Callable[[], float] = time.perf_counter):
        self.scheduler = scheduler
        self.runner = runner
        self.clock = clock

    def add_request(self, seq: Sequence) -> None:
        self.scheduler.add(seq)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> tuple[list[TokenEvent], StepRecord | None]:
        """One scheduling step. Returns ([], None) when there is nothing to run."""
        batch = self.scheduler.schedule()
        if batch.is_empty:
            return [], None
        blocks = self.scheduler.block_manager
        kv_blocks_used = blocks.num_used_blocks  # before finished sequences free theirs
        start_s = self.clock()
        token_ids = self.runner.run(batch)
        duration_s = self.clock() - start_s
        events = self.scheduler.postprocess(batch, token_ids)
        record = StepRecord(
            start_s=start_s, duration_s=duration_s, role=self.scheduler.config.role,
            num_prefill_seqs=len(batch.prefill), num_prefill_tokens=batch.num_prefill_tokens,
            num_decode_seqs=len(batch.decode), num_decode_ctx_tokens=batch.num_decode_ctx_tokens,
            num_decode_padded_tokens=batch.num_decode_padded_tokens,
            prefill_q_tokens2=batch.prefill_attn_work,
            kv_blocks_used=kv_blocks_used, kv_blocks_total=blocks.num_blocks,
            num_preempted=len(batch.preempted))
        return events, record
