"""Front-side state of one request, from admission to its telemetry row."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from gpuprobe.server.openai_api import GenRequest


@dataclass
class Tracked:
    """One admitted request. Times are epoch seconds (time.time()).

    events carries what the HTTP handler streams: ("token", token_id, finish_reason|None) and
    finally ("done", finish_reason) or ("error", http_status, message).
    """

    rid: str
    req: GenRequest
    arrival_s: float
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    layout: object = None  # the LayoutInstance running it, None while queued in the front
    layout_name: str = ""
    owner: str = ""  # worker id that holds it now
    dispatch_s: float | None = None
    prefill_start_s: float | None = None
    prefill_end_s: float | None = None
    kv_handoff_s: float | None = None
    kv_handoff_bytes: int | None = None
    kv_recv_cpu_s: float | None = None  # cross: the decode worker's receive-thread CPU
    token_times_s: list[float] = field(default_factory=list)
    done: bool = False
    status: str = "ok"
    error: str | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_times_s)

    def worker_request(self) -> dict:
        """The plain dict a worker's ("add", ...) message carries."""
        r = self.req
        return {"rid": self.rid, "prompt": list(r.prompt_token_ids), "max_tokens": r.max_tokens,
                "temperature": r.temperature, "top_p": r.top_p, "seed": r.seed,
                "ignore_eos": r.ignore_eos, "arrival_s": self.arrival_s}
