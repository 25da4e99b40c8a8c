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
    decode_id: str = ""  # cross: the decode worker chosen for it at dispatch
    attempt: int = 0  # dispatches after the first (a worker lost before any token streamed)
    dispatch_s: float | None = None
    prefill_start_s: float | None = None
    prefill_end_s: float | None = None
    kv_handoff_s: float | None = None
    kv_handoff_bytes: int | None = None
    kv_recv_cpu_s: float | None = None  # cross: the decode worker's receive-thread CPU
    kv_xfer_s: float | None = None  # cross: the KV's transfer, first byte to last (receiver)
    token_times_s: list[float] = field(default_factory=list)
    early: dict = field(default_factory=dict)  # token index -> (id, finished, reason) ahead
    done: bool = False
    status: str = "ok"
    error: str | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_times_s)

    @property
    def wid(self) -> str:
        """The id workers know this dispatch by: a retry is a new one, so a lost worker's
        late messages about the old dispatch find nothing."""
        return self.rid if not self.attempt else f"{self.rid}~{self.attempt}"

    def worker_request(self, decode_addr: str | None = None) -> dict:
        """The plain dict a worker's ("add", ...) message carries; cross: where the prefill
        worker sends the KV."""
        r = self.req
        out = {"rid": self.wid, "prompt": list(r.prompt_token_ids), "max_tokens": r.max_tokens,
               "temperature": r.temperature, "top_p": r.top_p, "seed": r.seed,
               "ignore_eos": r.ignore_eos, "arrival_s": self.arrival_s}
        if decode_addr:
            out["decode_addr"], out["decode_id"] = decode_addr, self.decode_id
        return out
