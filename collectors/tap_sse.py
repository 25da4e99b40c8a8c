"""Following an OpenAI-style SSE stream as it passes through the tap, and what it records.

    watch = SseWatch(arrival_s, strip_usage=True)
    out = watch.feed(chunk, time.time())    # bytes to send on to the client now
    record = watch.record(...)              # a row for store.insert_requests

With `strip_usage` the tap asked upstream for stream_options.include_usage on the client's
behalf, so the usage-only chunk (choices == [], usage set) is taken out, as is the
`"usage":null` that some servers then add to every chunk: the client gets the bytes it would
have got directly. Events are then passed on whole (held at most until their blank line);
without `strip_usage` every chunk goes on at once, unchanged, and a copy is parsed.
"""
from __future__ import annotations

import json
import re
from typing import Any

_USAGE_NULL = re.compile(rb',\s*"usage"\s*:\s*null|"usage"\s*:\s*null\s*,')
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


class SseWatch:
    def __init__(self, arrival_s: float, strip_usage: bool = False):
        self.arrival_s = arrival_s
        self.strip_usage = strip_usage
        self.token_s: list[float] = []  # absolute time of each chunk carrying content
        self.usage: dict[str, Any] | None = None
        self.response_id: str | None = None
        self.model: str | None = None
        self.error: str | None = None
        self.num_chunks = 0
        self.done = False
        self._pending = b""

    def feed(self, chunk: bytes, now_s: float) -> bytes:
        """Take bytes from upstream; return what the client should get now."""
        self._pending += chunk
        out = []
        while True:
            m = _EVENT_END.search(self._pending)
            if m is None:
                break
            event, self._pending = self._pending[:m.end()], self._pending[m.end():]
            keep = self._event(event, now_s)
            if self.strip_usage and keep:
                out.append(_USAGE_NULL.sub(b"", event))
        if not self.strip_usage:
            return chunk
        return b"".join(out)

    def finish(self) -> bytes:
        """Bytes still held at the end of the stream (an event with no closing blank line)."""
        rest, self._pending = self._pending, b""
        return rest if self.strip_usage else b""

    def _event(self, event: bytes, now_s: float) -> bool:
        """Note what the event says; False if it is the usage chunk the tap must strip."""
        data = b"\n".join(line[5:].lstrip() for line in event.splitlines() if line.startswith(b"data:"))
        if not data:
            return True
        if data.strip() == b"[DONE]":
            self.done = True
            return True
        try:
            obj = json.loads(data)
        except ValueError:
            return True
        if not isinstance(obj, dict):
            return True
        self.num_chunks += 1
        self.response_id = self.response_id or obj.get("id")
        self.model = self.model or obj.get("model")
        if isinstance(obj.get("error"), dict):
            self.error = str(obj["error"].get("message", obj["error"]))[:500]
        choices = obj.get("choices") or []
        if any(_content(c) for c in choices if isinstance(c, dict)):
            self.token_s.append(now_s)
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
            if self.strip_usage and not choices:
                return False
        return True


def _content(choice: dict) -> bool:
    # A chunk with a text field is a token even when the text is empty: engines send one chunk
    # per token, and a token may hold half a UTF-8 character. (vLLM's role chunk goes out with
    # the first token, so it marks the first token's time too.)
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return isinstance(delta.get("content"), str) or bool(delta.get("reasoning_content") or delta.get("tool_calls"))
    return isinstance(choice.get("text"), str)


def request_record(arrival_s: float, finish_s: float, status: str, *, token_s: list[float] = (),
                   usage: dict | None = None, request_id: str | None = None, model: str | None = None,
                   error: str | None = None, run_id: str = "", host: str = "") -> dict:
    """A requests-table row (times in seconds; token_times relative to arrival)."""
    gaps = sorted(b - a for a, b in zip(token_s, token_s[1:]))
    usage = usage or {}
    first = token_s[0] if token_s else None
    return {
        "run_id": run_id, "source": "tap", "request_id": request_id or f"tap-{arrival_s:.6f}",
        "host": host, "model": model, "arrival_s": arrival_s,
        "prompt_tokens": usage.get("prompt_tokens"),
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
