"""What one engine step does (Batch of PrefillChunks and decodes) and what it yields (TokenEvent).

Plain data shared by the scheduler, the model runner and the simulator's cost model. Treat
them as read-only. They are slotted, not frozen: a frozen dataclass pays object.__setattr__
per field, and the simulator builds one of each per simulated request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from gpuprobe.engine.sequence import Sequence


@dataclass(slots=True, unsafe_hash=True)
class PrefillChunk:
    """Prefill positions [start, start + num_tokens) of seq.token_ids.

    is_last: the chunk reaches the end of the sequence, so the step samples a token for it.
    """

    seq: Sequence
    start: int
    num_tokens: int
    is_last: bool = field(init=False)

    def __post_init__(self) -> None:
        # Fixed now: seq.num_tokens grows once the step's token is appended.
        self.is_last = self.start + self.num_tokens == self.seq.num_tokens


@dataclass(slots=True)
class Batch:
    """One step's work. Decode seqs each feed their last token at position num_tokens - 1.

    The counts are taken when the batch is built; the sequences themselves move on after
    postprocess().
    """

    prefill: list[PrefillChunk] = field(default_factory=list)
    decode: list[Sequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    num_prefill_tokens: int = field(init=False)
    num_decode_ctx_tokens: int = field(init=False)  # KV positions the decodes attend over
    # What one padded attention call over the decodes reads: each row padded to the longest
    # context (the reference runner's decode attention; a paged kernel reads ctx tokens only).
    num_decode_padded_tokens: int = field(init=False)

    def __post_init__(self) -> None:
        # Most steps are prefill-only or decode-only: skip the empty side's list.
        prefill, decode = self.prefill, self.decode
        self.num_prefill_tokens = sum([c.num_tokens for c in prefill]) if prefill else 0
        if decode:
            done = [s.num_computed_tokens for s in decode]
            self.num_decode_ctx_tokens = sum(done) + len(done)
            self.num_decode_padded_tokens = (max(done) + 1) * len(done)
        else:
            self.num_decode_ctx_tokens = self.num_decode_padded_tokens = 0

    @property
    def prefill_attn_work(self) -> int:
        """Q: the sum over chunks of (start + n)^2 - start^2, the attention work of the step's
        prefills (T^2 for one whole prompt of T tokens)."""
        return sum([(c.start + c.num_tokens) ** 2 - c.start ** 2 for c in self.prefill])

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + len(self.decode)

    @property
    def is_empty(self) -> bool:
        return not self.prefill and not self.decode


class TokenEvent(NamedTuple):
    """A token sampled for a request. index: 0-based position among its completion tokens."""

    seq_id: str
    token_id: int
    index: int
    finished: bool
    finish_reason: str | None
