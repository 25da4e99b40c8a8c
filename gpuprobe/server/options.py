"""Server options and layout choices: plain frozen data shared by the front and the layouts."""

from __future__ import annotations

from dataclasses import dataclass, field

LAYOUTS = ("monolithic", "intra", "cross")


MAX_LOCAL_WORKERS = 8  # per role, for a cross layout the front starts itself


@dataclass(frozen=True)
class LayoutConfig:
    """Which layout runs, and how it is split. prefill_share: fraction of cores (CPU) or SMs
    (CUDA) given to the prefill workers in intra/cross; ignored by monolithic. Cross runs
    num_prefill x num_decode workers (xPyD): started by the front on this host, or, when
    remote, the first ones of the workers the front was given by address."""

    layout: str = "monolithic"
    prefill_share: float = 0.5
    chunked_prefill_tokens: int | None = None
    num_prefill: int = 1
    num_decode: int = 1
    remote: bool = False

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        if self.remote and self.layout != "cross":
            raise ValueError(f"remote workers run the cross layout, not {self.layout}")
        for name in ("num_prefill", "num_decode"):
            n = getattr(self, name)
            if n < 1 or (n > 1 and self.layout != "cross"):
                raise ValueError(f"{name} must be 1 except in cross, where it is at least 1, "
                                 f"got {n}")
            if n > MAX_LOCAL_WORKERS and not self.remote:
                raise ValueError(f"{name} must be at most {MAX_LOCAL_WORKERS} for workers the "
                                 f"front starts itself, got {n}")
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
    # `gpuprobe worker`s the front may route to (cross, remote), by link address
    prefill_workers: tuple[str, ...] = ()
    decode_workers: tuple[str, ...] = ()
    link: object = None  # their LinkConfig (shared secret, TLS CA)
    cores: tuple[int, ...] = ()  # CPU ids to use; () = all this process may run on
    model_overrides: dict = field(default_factory=dict)
