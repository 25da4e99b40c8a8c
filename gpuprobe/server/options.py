"""Server options and layout choices: plain frozen data shared by the front and the layouts."""

from __future__ import annotations

from dataclasses import dataclass, field

LAYOUTS = ("monolithic", "intra", "cross")


@dataclass(frozen=True)
class LayoutConfig:
    """Which layout runs, and how it is split. prefill_share: fraction of cores (CPU) or SMs
    (CUDA) given to the prefill worker in intra/cross; ignored by monolithic."""

    layout: str = "monolithic"
    prefill_share: float = 0.5
    chunked_prefill_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if not 0 < self.prefill_share < 1:
            raise ValueError(f"prefill_share must be in (0, 1), got {self.prefill_share}")
        if self.chunked_prefill_tokens is not None and self.chunked_prefill_tokens < 1:
            raise ValueError(f"chunked_prefill_tokens must be >= 1, "
                             f"got {self.chunked_prefill_tokens}")


@dataclass(frozen=True)
class ServeOptions:
    """Everything fixed for the server's lifetime. kv_cache_mb is per worker."""

    model: str = "tiny"
    device: str = "cpu"
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_queue: int = 256
    max_queue_wait_s: float = 10.0  # refuse (429) what would wait longer for a first token; 0: off
    kv_cache_mb: int = 256
    block_size: int = 16
    cross_decode_addr: str | None = None  # host:port; None = 127.0.0.1 and a free port
    cores: tuple[int, ...] = ()  # CPU ids to use; () = all this process may run on
    model_overrides: dict = field(default_factory=dict)
