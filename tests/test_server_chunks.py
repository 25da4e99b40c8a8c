"""What each token puts on the wire (streaming.StreamText.chunk) and the admission rule
(admission.Admission), exactly, without a server: the byte tokenizer makes every token one
UTF-8 byte, so which tokens complete a character is known."""

from __future__ import annotations

import pytest

from gpuprobe.llama.tokenizer import ByteTokenizer
from gpuprobe.server import openai_api as oa
from gpuprobe.server.admission import Admission
from gpuprobe.server.streaming import StreamText

TOK = ByteTokenizer(512)


def _chunks(ids, last_reason="length", stop=()):
    text = StreamText(TOK, stop)
    out = []
    for i, t in enumerate(ids):
        chunk = text.chunk(t, last_reason if i == len(ids) - 1 else None)
        out.append(chunk)
        if text.stopped:
            break
    return out


def test_one_chunk_per_completed_character_none_empty():
    s = "aé€😀b"  # 1, 2, 3, 4 and 1 bytes
    out = _chunks(list(s.encode()))
    sent = [c for c in out if c is not None]
    assert [c[0] for c in sent] == list(s)  # each chunk is exactly one character
    assert [c is None for c in out] == [False, True, False, True, True, False,
                                        True, True, True, False, False]
    assert sent[-1][1] == "length" and all(c[1] is None for c in sent[:-1])


def test_text_less_tokens_ride_with_the_next_text_and_a_bare_finish_is_sent():
    # 300 is past the byte tokenizer's specials: no text. It is held, not sent empty.
    out = _chunks([ord("h"), 300, 300, ord("i"), 300], last_reason="stop")
    assert out == [("h", None), None, None, ("i", None), ("", "stop")]


def test_split_character_at_a_stop_string_and_the_chunk_shapes():
    out = _chunks(list("xé!".encode()) + [ord("y")], stop=("!",))
    assert out == [("x", None), None, ("é", None), ("", "stop")]
    chat = oa.GenRequest("chat", "m", (1,), 4, 1.0, 1.0, None, False, True, False)
    done = oa.stream_chunk(chat, "id", "m", "", "stop")["choices"][0]
    assert done["delta"] == {} and done["finish_reason"] == "stop"
    first = oa.stream_chunk(chat, "id", "m", "", "length", first=True)["choices"][0]
    assert first["delta"] == {"role": "assistant"}
    assert oa.stream_chunk(chat, "id", "m", "é", None)["choices"][0]["delta"] == {"content": "é"}


def test_admission_refuses_by_predicted_wait_with_retry_after():
    a = Admission(max_in_flight=100, max_queue_wait_s=5.0)
    a.check(in_flight=50, waiting=40)  # no estimate yet: admitted
    a.on_first_token(arrival_s=0.0, now_s=0.2)  # idle server: its own TTFT
    assert a.interval_s == pytest.approx(0.2)
    a.on_first_token(arrival_s=0.1, now_s=2.2)  # queued behind: 2 s since the last first token
    assert a.interval_s == pytest.approx(0.8 * 0.2 + 0.2 * 2.0)
    assert a.predicted_wait_s(9) == pytest.approx(10 * 0.56)
    a.check(in_flight=50, waiting=0)  # nobody waits: never refused on the estimate
    a.check(in_flight=50, waiting=7)  # 8 x 0.56 = 4.48 s
    with pytest.raises(oa.ApiError) as exc:
        a.check(in_flight=50, waiting=9)  # 5.6 s
    assert exc.value.status == 429 and exc.value.retry_after_s == 1
    with pytest.raises(oa.ApiError) as exc:
        a.check(in_flight=50, waiting=19)  # 11.2 s: retry when 6.2 s have drained
    assert exc.value.retry_after_s == 7 and "--max-queue-wait" in str(exc.value)
    with pytest.raises(oa.ApiError) as exc:
        a.check(in_flight=100, waiting=0)
    assert exc.value.status == 429 and "--max-queue" in str(exc.value)
    Admission(100, 0).check(in_flight=50, waiting=10_000)  # 0: no wait limit


def test_prompt_refused_by_byte_length_before_tokenising():
    calls = []

    def encode(text):
        calls.append(len(text))
        return list(text.encode())

    body = {"prompt": "x" * 4097, "max_tokens": 1}
    with pytest.raises(oa.ApiError) as exc:
        oa.parse_completion(body, encode, 512, max_context=4096, max_prompt_bytes=4096)
    assert exc.value.param == "prompt" and "4097 bytes" in str(exc.value) and calls == []
    ok = oa.parse_completion({"prompt": "x" * 100, "max_tokens": 1}, encode, 512, 4096,
                             max_prompt_bytes=4096)
    assert len(ok.prompt_token_ids) == 100
    msgs = {"messages": [{"role": "user", "content": "é" * 2049}]}  # 4098 bytes
    with pytest.raises(oa.ApiError) as exc:
        oa.parse_chat(msgs, lambda m: [1], 4096, max_prompt_bytes=4096)
    assert exc.value.param == "messages"
