"""Throwaway steps a worker runs before it says it is ready.

The first steps of a fresh torch process pay one-time costs (allocator growth, kernel and
thread-pool start-up): measured here, the first batch of four decodes on smollm2-135m took
3.2 s against about 0.1 s afterwards. Served requests, and any TBT measured from them, should
not see that.
"""

from __future__ import annotations

import dataclasses
import time

from gpuprobe.engine import LLMEngine, SamplingParams, Scheduler, SchedulerConfig, Sequence

PROMPT_LENGTHS = (16, 16, 16, 16, 16, 16, 16, 128)  # a batch of decodes and one longer prefill


def warm_up(runner, config: SchedulerConfig, max_tokens: int = 4) -> float:
    """Run a few prefills and decode steps on `runner` with a private scheduler; seconds taken.

    Uses the runner's KV blocks while nothing else holds them, and frees them all again.
    """
    start = time.perf_counter()
    cfg = dataclasses.replace(config, role="mixed", chunked_prefill_tokens=None, eos_token_id=None)
    engine = LLMEngine(Scheduler(cfg), runner)
    for i, n in enumerate(PROMPT_LENGTHS):
        if (n + max_tokens) // cfg.block_size + 1 > cfg.num_blocks // len(PROMPT_LENGTHS):
            continue  # a KV cache too small to spare: skip rather than preempt
        engine.add_request(Sequence(f"warmup-{i}", [1] * n, SamplingParams(max_tokens=max_tokens,
                                                                           ignore_eos=True)))
    while engine.has_unfinished():
        engine.step()
    return time.perf_counter() - start
