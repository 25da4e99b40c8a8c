"""One request's state as the scheduler sees it: tokens, KV progress, blocks, status."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each completion token.

    temperature 0 means greedy. `seed` makes sampling reproducible per request: token i of a
    request is drawn from a generator seeded by (seed, i), whatever the batch around it.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 16
    ignore_eos: bool = False
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")


class SeqStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    """A request: prompt plus the tokens generated so far.

    KV invariant: positions [0, num_computed_tokens) hold valid KV. While decoding,
    num_computed_tokens == num_tokens - 1: the last sampled token is the next step's input.
    A preempted sequence is recomputed: its whole token list is prefilled again, and that
    prefill samples its next token.

    The prompt is kept as given when it is a tuple or a range (the simulator passes
    range(n): no token list materialized for a prompt whose ids nobody reads); any other
    iterable is copied into a tuple. num_tokens is a plain counter because the scheduler
    reads it in its hot loops; token_ids builds the full list on demand (the model runner
    reads it once per prefill chunk).
    """

    __slots__ = ("seq_id", "prompt_token_ids", "num_prompt_tokens", "num_tokens", "_completion",
                 "params", "arrival_s", "num_computed_tokens", "block_table", "status",
                 "finish_reason")

    def __init__(self, seq_id: str, prompt_token_ids: Iterable[int], params: SamplingParams,
                 arrival_s: float = 0.0):
        if type(prompt_token_ids) not in (tuple, range):
            prompt_token_ids = tuple(prompt_token_ids)
        n = len(prompt_token_ids)
        if not n:
            raise ValueError(f"request {seq_id!r}: prompt must have at least one token")
        self.seq_id = seq_id
        self.prompt_token_ids = prompt_token_ids
        self.num_prompt_tokens = n
        self.num_tokens = n
        self._completion: list[int] = []
        self.params = params
        self.arrival_s = arrival_s
        self.num_computed_tokens = 0
        self.block_table: list[int] = []
        self.status = SeqStatus.WAITING
        self.finish_reason: str | None = None  # 'length' | 'stop' | 'abort'

    @classmethod
    def from_prefilled(cls, seq_id: str, prompt_token_ids: Iterable[int], first_token_id: int,
                       params: SamplingParams, arrival_s: float = 0.0) -> Sequence:
        """Rebuild, on a decode worker, a sequence whose prefill ran elsewhere (KV to import)."""
        seq = cls(seq_id, prompt_token_ids, params, arrival_s)
        seq.append_token(first_token_id)
        seq.num_computed_tokens = seq.num_prompt_tokens
        return seq

    def __repr__(self) -> str:
        return (f"Sequence({self.seq_id!r}, tokens={self.num_tokens}, "
                f"computed={self.num_computed_tokens}, {self.status.name})")

    @property
    def token_ids(self) -> list[int]:
        """Prompt then completion ids, a new list."""
        return [*self.prompt_token_ids, *self._completion]

    @property
    def num_completion_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    @property
    def completion_token_ids(self) -> list[int]:
        return self._completion[:]

    @property
    def last_token_id(self) -> int:
        return self._completion[-1] if self._completion else self.prompt_token_ids[-1]

    @property
    def is_prefill_done(self) -> bool:
        # Only the last sampled token lacks KV: the next step is a one-token decode.
        return (self.num_tokens > self.num_prompt_tokens
                and self.num_computed_tokens >= self.num_tokens - 1)

    @property
    def is_finished(self) -> bool:
        return self.status is SeqStatus.FINISHED

    def num_blocks(self, block_size: int) -> int:
        """Blocks needed to hold KV for every token in the sequence."""
        return -(-self.num_tokens // block_size)

    def append_token(self, token_id: int) -> None:
        self._completion.append(token_id)
        self.num_tokens += 1


