"""Torch-free serving engine core: request state, KV block accounting, scheduling policy.

Nothing here imports torch, so the simulator can drive the very same `Scheduler` with a cost
model where the reference server drives it with a real `ModelRunner`.
"""

from gpuprobe.engine.block_manager import BlockManager
from gpuprobe.engine.engine import LLMEngine, Runner, StepRecord
from gpuprobe.engine.scheduler import Batch, PrefillChunk, Scheduler, SchedulerConfig, TokenEvent
from gpuprobe.engine.sequence import SamplingParams, Sequence, SeqStatus

__all__ = [
    "Batch", "BlockManager", "LLMEngine", "PrefillChunk", "Runner", "SamplingParams",
    "Scheduler", "SchedulerConfig", "SeqStatus", "Sequence", "StepRecord", "TokenEvent",
]
