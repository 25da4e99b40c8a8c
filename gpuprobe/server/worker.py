"""A worker process: one model, one LLMEngine, driven by messages from the front.

Front -> worker (over a multiprocessing Pipe, or a remote worker's control link):
    ("add", request dict)   ("abort", rid)   ("drain",)   ("stop",)   ("reset",)
Worker -> front:
    ("ready", info)  ("step", events, step record, timings)  ("adopted", rid, handoff dict)
    ("error", rid, message)  ("requeue", [rid, ...])  ("fatal", message)
events are (rid, token_id, index, finished, finish_reason) tuples; timings map rid to
prefill_start_s / prefill_end_s (epoch seconds). "reset" (a remote worker's front left or a
new one arrived) aborts everything held and leaves the worker running. Torch is imported here
only, in the child.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import wait

IDLE_WAIT_S = 0.05


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs, picklable. cores: CPU ids it is pinned to (CPU device)."""

    worker_id: str
    role: str  # 'mixed' | 'prefill' | 'decode'
    model: str
    device: str
    cores: tuple[int, ...]
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    chunked_prefill_tokens: int | None = None
    kv_cache_mb: int = 256
    block_size: int = 16
    sm_share: float | None = None  # CUDA split layouts: this worker's share of the SMs
    handoff: str = "none"  # 'none' | 'pipe' | 'tcp'
    listen_addr: str | None = None  # tcp decode started by the front: its link (port 0: any)
    link: object = None  # tcp: the LinkConfig (shared secret, TLS files) of the KV link
    kv_ring: tuple[str, int] | None = None  # pipe: the shared KV ring's (file, data bytes)
    model_overrides: dict = field(default_factory=dict)


def worker_main(spec: WorkerSpec, conn, peer) -> None:
    """Process entry point. peer: the handoff Connection (pipe) or None."""
    try:
        from gpuprobe.server.worker_loop import WorkerLoop

        WorkerLoop(spec, conn, peer).run()
    except (KeyboardInterrupt, BrokenPipeError, EOFError):
        pass
    except BaseException as exc:  # tell the front why before dying
        try:
            conn.send(("fatal", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        except OSError:
            pass
        raise
    else:
        # Stopped as asked, everything sent: skip the interpreter's teardown, whose last
        # garbage collection of the model's objects took 3.5 s (a layout's stop waited on it).
        conn.close()
        os._exit(0)


def pin_cpu(cores: tuple[int, ...]) -> int:
    """Pin this process to `cores`; returns the thread count torch should use."""
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)
    return max(1, len(cores) or os.cpu_count() or 1)


def wait_inputs(objs: list, timeout_s: float) -> list:
    return wait(objs, timeout_s)
