"""Following an OpenAI-style SSE stream as it passes through the tap, and what it records.

    watch = SseWatch(arrival_s)
    watch.feed(chunk, time.time())          # parses a copy; the tap sends `chunk` on unchanged
    record = request_record(...)            # a row for store.insert_requests

The tap never rewrites the stream: it does not ask upstream for usage on the client's behalf
(vLLM 0.32 then moves `system_fingerprint` into the usage chunk, so stripping that chunk lost a
field the client would have had). Token times are those of the chunks that carry a token;
vLLM's opening chunk (`"delta": {"role": "assistant", "content": ""}`) carries none.
"""
from __future__ import annotations

import json
import re
from typing import Any

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


class SseWatch:
    def __init__(self, arrival_s: float):
        self.arrival_s = arrival_s
        self.token_s: list[float] = []  # absolute time of each chunk carrying a token
        self.usage: dict[str, Any] | None = None
        self.response_id: str | None = None
        self.model: str | None = None
        self.error: str | None = None
        self.num_chunks = 0
        self.done = False
        self._pending = b""

    def feed(self, chunk: bytes, now_s: float) -> None:
        """Take a copy of bytes from upstream; whole events are parsed as they complete."""
        self._pending += chunk
        while (m := _EVENT_END.search(self._pending)) is not None:
            event, self._pending = self._pending[:m.end()], self._pending[m.end():]
            self._event(event, now_s)

    def _event(self, event: bytes, now_s: float) -> None:
        data = b"\n".join(line[5:].lstrip() for line in event.splitlines() if line.startswith(b"data:"))
        if not data:
            return
        if data.strip() == b"[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(data)
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        self.num_chunks += 1
        self.response_id = self.response_id or obj.get("id")
        self.model = self.model or obj.get("model")
        if isinstance(obj.get("error"), dict):
            self.error = str(obj["error"].get("message", obj["error"]))[:500]
        choices = obj.get("choices") or []
        if any(is_token(c) for c in choices if isinstance(c, dict)):
            self.token_s.append(now_s)
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]


def is_token(choice: dict) -> bool:
    """Whether a streamed choice carries a token. A text field counts even when empty (a token
    may hold half a UTF-8 character); a chat delta that opens the message with its role and
    no text (vLLM's first chunk) does not."""
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return isinstance(choice.get("text"), str)
    if delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls"):
        return True
    content = delta.get("content")
    if "role" in delta and not content:
        return False
    return isinstance(content, str)


def request_record(arrival_s: float, finish_s: float, status: str, *, token_s: list[float] = (),
                   usage: dict | None = None, request_id: str | None = None, model: str | None = None,
                   error: str | None = None, run_id: str = "", host: str = "",
                   prompt_tokens: int | None = None) -> dict:
    """A requests-table row (times in seconds; token_times relative to arrival). prompt_tokens:
    the count from elsewhere (upstream's /tokenize) when the response had no usage."""
    gaps = sorted(b - a for a, b in zip(token_s, token_s[1:]))
    usage = usage or {}
    first = token_s[0] if token_s else None
    return {
        "run_id": run_id, "source": "tap", "request_id": request_id or f"tap-{arrival_s:.6f}",
        "host": host, "model": model, "arrival_s": arrival_s,
        "prompt_tokens": usage.get("prompt_tokens", prompt_tokens),
        "output_tokens": usage.get("completion_tokens", len(token_s) if token_s else None),
        "first_token_s": first, "ttft_s": None if first is None else first - arrival_s,
        "tbt_p50_s": _pct(gaps, 0.5), "tbt_p99_s": _pct(gaps, 0.99), "tbt_max_s": gaps[-1] if gaps else None,
        "finish_s": finish_s, "e2e_s": finish_s - arrival_s, "status": status, "error": error,
        "token_times": [round(t - arrival_s, 6) for t in token_s],
    }


def _pct(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]
