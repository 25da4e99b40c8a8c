"""SchedulerConfig: the limits and role of one scheduler (plain, frozen data)."""

from __future__ import annotations

from dataclasses import dataclass

ROLES = ("mixed", "prefill", "decode")


@dataclass(frozen=True)
class SchedulerConfig:
    """Limits and layout of one scheduler. Token counts are per step.

    role: 'mixed' prefills and decodes; 'prefill' only prefills and hands each sequence on
    after its first token (pop_prefilled); 'decode' takes prefilled sequences
    (add_prefilled) and decodes them, recomputing only the ones it had to preempt.
    """

    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    chunked_prefill_tokens: int | None = None
    num_blocks: int = 1024
    block_size: int = 16
    eos_token_id: int | None = None
    role: str = "mixed"

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {self.role!r}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "num_blocks", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.chunked_prefill_tokens is not None and self.chunked_prefill_tokens < 1:
            raise ValueError(f"chunked_prefill_tokens must be >= 1 or None, "
                             f"got {self.chunked_prefill_tokens}")

    @property
    def max_decode_seqs(self) -> int:
        """Most decodes one step takes: chunked prefill spends its token budget on them too."""
        if self.chunked_prefill_tokens is None:
            return self.max_num_seqs
        return min(self.max_num_seqs, self.chunked_prefill_tokens)
