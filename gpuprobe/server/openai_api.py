"""OpenAI-compatible request parsing and response shaping. No I/O, no torch.

parse_*() turn a decoded JSON body into a GenRequest or raise ApiError naming the field;
the *_chunk / *_response helpers build the JSON bodies the OpenAI clients expect.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

CHAT_ROLES = ("system", "user", "assistant", "tool")  # what the chat templates render
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"  # OpenAI's code for a prompt too long
# A refused request's reason (store, /metrics): its error code, else one per HTTP status.
_REASON_BY_STATUS = {400: "invalid_request", 404: "model_not_found", 413: "body_too_large",
                     429: "overloaded", 503: "unavailable"}


class ApiError(Exception):
    """A client error: HTTP `status` with an OpenAI-style error body naming `param`."""

    def __init__(self, message: str, param: str | None = None, status: int = 400,
                 kind: str = "invalid_request_error", code: str | None = None,
                 retry_after_s: int | None = None, prompt_tokens: int | None = None):
        super().__init__(message)
        self.param, self.status, self.kind, self.code = param, status, kind, code
        self.retry_after_s = retry_after_s  # a 429's Retry-After
        self.prompt_tokens = prompt_tokens  # a prompt too long, tokenised: its length (load)

    @property
    def reason(self) -> str:
        """Why the request was refused, one word: the error code where there is one
        (context_length_exceeded, max_in_flight, ...), else by status (invalid_request, ...)."""
        return self.code or _REASON_BY_STATUS.get(self.status, f"http_{self.status}")

    def body(self) -> dict:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param,
                          "code": self.code}}


@dataclass(frozen=True)
class GenRequest:
    """One parsed generation request. Token counts are after tokenization."""

    kind: str  # 'completion' | 'chat'
    model: str
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    ignore_eos: bool
    stream: bool
    include_usage: bool
    stop: tuple[str, ...] = field(default=())
    # stream_options.continuous_usage_stats (vLLM's): every chunk carries the usage so far, and
    # every token gets its chunk (content "" while a character is incomplete): per-token times
    # for a load generator, which a client counting chunks as text does not ask for
    continuous_usage: bool = False
    # vLLM's return_token_ids: each choice (each stream chunk) also carries the ids of the
    # tokens its text came from, so a client can compare outputs token for token
    return_token_ids: bool = False


def _get(body: dict, name: str, kinds: tuple, default: Any) -> Any:
    value = body.get(name, default)
    if value is None:
        return default
    # bool is an int subclass; a JSON true where a number belongs is a type error.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        names = "/".join(k.__name__ for k in kinds)
        raise ApiError(f"'{name}' must be of type {names}, got {type(value).__name__}", name)
    return value


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,) if stop else ()
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop) and len(stop) <= 4:
        return tuple(s for s in stop if s)
    raise ApiError("'stop' must be a string or a list of up to 4 strings", "stop")


def _common(body: Any, kind: str, prompt_ids: list[int], max_context: int,
            default_max_tokens: int) -> GenRequest:
    max_tokens = _get(body, "max_tokens", (int,), None)
    if kind == "chat":
        max_tokens = _get(body, "max_completion_tokens", (int,), max_tokens)
    prompt_param = "prompt" if kind == "completion" else "messages"
    if max_tokens is None:
        if len(prompt_ids) >= max_context:
            raise ApiError(f"this model's maximum context length is {max_context} tokens; the "
                           f"prompt alone has {len(prompt_ids)}, leaving no room for a "
                           f"completion", prompt_param, code=CONTEXT_LENGTH_EXCEEDED,
                           prompt_tokens=len(prompt_ids))
        max_tokens = min(default_max_tokens, max_context - len(prompt_ids))
    if max_tokens < 1:
        raise ApiError(f"'max_tokens' must be >= 1, got {max_tokens}", "max_tokens")
    if len(prompt_ids) + max_tokens > max_context:
        raise ApiError(f"this model's maximum context length is {max_context} tokens; the "
                       f"prompt has {len(prompt_ids)} and max_tokens is {max_tokens}",
                       "max_tokens" if len(prompt_ids) < max_context else prompt_param,
                       code=CONTEXT_LENGTH_EXCEEDED, prompt_tokens=len(prompt_ids))
    if _get(body, "n", (int,), 1) != 1:
        raise ApiError("'n' must be 1: this server returns one choice per request (vLLM "
                       "supports n > 1, gpuprobe's reference server does not)", "n")
    temperature = float(_get(body, "temperature", (int, float), 1.0))
    if not 0 <= temperature <= 2:
        raise ApiError(f"'temperature' must be in [0, 2], got {temperature}", "temperature")
    top_p = float(_get(body, "top_p", (int, float), 1.0))
    if not 0 < top_p <= 1:
        raise ApiError(f"'top_p' must be in (0, 1], got {top_p}", "top_p")
    seed = _get(body, "seed", (int,), None)
    if seed is not None and not -(2 ** 63) <= seed < 2 ** 64:
        # torch's generators take no other; a worker would fail on it mid-step
        raise ApiError(f"'seed' must be in [-2^63, 2^64), got {seed}", "seed")
    options = _get(body, "stream_options", (dict,), {})
    include_usage = _get(options, "include_usage", (bool,), False)
    continuous = _get(options, "continuous_usage_stats", (bool,), False)
    return GenRequest(
        kind=kind, model=_get(body, "model", (str,), ""), prompt_token_ids=tuple(prompt_ids),
        max_tokens=max_tokens, temperature=temperature, top_p=top_p,
        seed=seed, ignore_eos=_get(body, "ignore_eos", (bool,), False),
        stream=_get(body, "stream", (bool,), False), include_usage=include_usage, stop=_stop(body),
        continuous_usage=continuous,
        return_token_ids=_get(body, "return_token_ids", (bool,), False))


def _check_ids(ids: list, vocab_size: int, param: str) -> list[int]:
    if not ids:
        raise ApiError(f"'{param}' must not be empty", param)
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size:
            raise ApiError(f"'{param}' token ids must be integers in [0, {vocab_size}), got {t!r}",
                           param)
    return ids


def _check_bytes(texts: list[str], max_bytes: int | None, max_context: int, param: str) -> None:
    """Refuse text that cannot fit in max_context tokens by its UTF-8 length alone, so a
    1 MB prompt costs microseconds, not a second of tokenising."""
    if max_bytes is None:
        return
    size = sum(len(t.encode("utf-8", errors="surrogatepass")) for t in texts)
    if size > max_bytes:
        raise ApiError(f"this model's maximum context length is {max_context} tokens; the "
                       f"prompt's {size} bytes of text are more than that many tokens can hold "
                       f"({max_bytes} bytes)", param, code=CONTEXT_LENGTH_EXCEEDED)


def parse_completion(body: Any, encode: Callable[[str], list[int]], vocab_size: int,
                     max_context: int, default_max_tokens: int = 16,
                     max_prompt_bytes: int | None = None) -> GenRequest:
    """/v1/completions body -> GenRequest. prompt: text, token ids, or a one-element list of either."""
    if not isinstance(body, dict):
        raise ApiError("request body must be a JSON object", None)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one; real batches are not supported
    if isinstance(prompt, str):
        _check_bytes([prompt], max_prompt_bytes, max_context, "prompt")
        ids = encode(prompt)
        if not ids:
            raise ApiError("'prompt' must not be empty", "prompt")
    elif isinstance(prompt, list):
        ids = _check_ids(prompt, vocab_size, "prompt")
    else:
        raise ApiError("'prompt' must be a string or a list of token ids (one prompt per "
                       "request)", "prompt")
    return _common(body, "completion", ids, max_context, default_max_tokens)


def parse_chat(body: Any, apply_template: Callable[[list[dict]], list[int]], max_context: int,
               default_max_tokens: int = 256, max_prompt_bytes: int | None = None) -> GenRequest:
    """/v1/chat/completions body -> GenRequest; messages are rendered by the model's template."""
    if not isinstance(body, dict):
        raise ApiError("request body must be a JSON object", None)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError("'messages' must be a non-empty list", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ApiError(f"'messages[{i}]' must be an object with 'role' and 'content'",
                           "messages")
        if m.get("role") not in CHAT_ROLES:
            raise ApiError(f"'messages[{i}].role' must be one of {', '.join(CHAT_ROLES)}, got "
                           f"{m.get('role')!r}", "messages")
        content = m.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            m = {**m, "content": content}
            messages[i] = m
        if not isinstance(content, str):
            raise ApiError(f"'messages[{i}].content' must be a string", "messages")
    _check_bytes([m["content"] for m in messages], max_prompt_bytes, max_context, "messages")
    return _common(body, "chat", apply_template(messages), max_context, default_max_tokens)


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def stream_chunk(req: GenRequest, rid: str, model: str, text: str, finish_reason: str | None,
                 first: bool = False, completion_tokens: int | None = None,
                 token_ids: list[int] | None = None) -> dict:
    """One SSE chunk carrying `text` (a chat delta or a completion text piece). A chat chunk
    that only finishes the stream has no content (OpenAI's `"delta":{}`). token_ids: the
    tokens since the last chunk, with return_token_ids."""
    if req.kind == "chat":
        delta = {"content": text} if text or not finish_reason else {}
        if first:
            delta = {"role": "assistant", **delta}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    else:
        choice = _text_choice(text, finish_reason)
    out = _body(req, rid, model, choice, token_ids, stream=True)
    if completion_tokens is not None:
        out["usage"] = usage(len(req.prompt_token_ids), completion_tokens)
    return out


def usage_chunk(req: GenRequest, rid: str, model: str, completion_tokens: int) -> dict:
    """The last chunk with stream_options.include_usage: usage, no choices."""
    obj = "chat.completion.chunk" if req.kind == "chat" else "text_completion"
    return {"id": rid, "object": obj, "created": int(time.time()), "model": model, "choices": [],
            "usage": usage(len(req.prompt_token_ids), completion_tokens)}


def full_response(req: GenRequest, rid: str, model: str, text: str, finish_reason: str,
                  completion_tokens: int, token_ids: list[int] | None = None) -> dict:
    if req.kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "logprobs": None, "finish_reason": finish_reason}
    else:
        choice = _text_choice(text, finish_reason)
    return {**_body(req, rid, model, choice, token_ids, stream=False),
            "usage": usage(len(req.prompt_token_ids), completion_tokens)}


def _text_choice(text: str, finish_reason: str | None) -> dict:
    return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}


def _body(req: GenRequest, rid: str, model: str, choice: dict, token_ids, stream: bool) -> dict:
    """A response or chunk around one choice: the object named by the request's kind, the
    choice's token ids where the request asked for them."""
    if req.return_token_ids:
        choice["token_ids"] = token_ids or []
    obj = ("chat.completion.chunk" if stream else "chat.completion") if req.kind == "chat" \
        else "text_completion"
    return {"id": rid, "object": obj, "created": int(time.time()), "model": model, "choices": [choice]}


def check_model(requested: str, served: str) -> None:
    """A request naming another model than the one served is a 404, as OpenAI answers it;
    a request naming none gets the served one."""
    if requested and requested != served:
        raise ApiError(f"The model `{requested}` does not exist.", "model", 404,
                       code="model_not_found")


def models_response(model: str, max_context: int, vocab_size: int,
                    kv_bytes_per_token: int = 0) -> dict:
    """GET /v1/models. Besides OpenAI's fields: max_model_len (vLLM's name) and vocab_size,
    so a client sending token-id prompts knows which ids are valid, and kv_bytes_per_token,
    which `profile --target` records (what a cross layout ships per prompt token)."""
    entry = {"id": model, "object": "model", "created": 0, "owned_by": "gpuprobe",
             "max_model_len": max_context, "vocab_size": vocab_size}
    if kv_bytes_per_token:
        entry["kv_bytes_per_token"] = kv_bytes_per_token
    return {"object": "list", "data": [entry]}
