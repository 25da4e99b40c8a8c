"""SmolLM2-135M-Instruct behind the reference server, driven by the official openai client."""

from __future__ import annotations

import pytest

from gpuprobe.server.launch import start_server

pytestmark = pytest.mark.timeout(240)


def test_openai_client_streaming_chat_answers_paris(tmp_path):
    openai = pytest.importorskip("openai")
    srv = start_server("smollm2-135m", "monolithic", store=str(tmp_path / "s.db"),
                       log_path=str(tmp_path / "server.log"))
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", timeout=120)
        stream = client.chat.completions.create(
            model="smollm2-135m", stream=True, max_tokens=40, temperature=0,
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            stream_options={"include_usage": True})
        pieces, usage = [], None
        for chunk in stream:
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
            if chunk.usage:
                usage = chunk.usage
        text = "".join(pieces)
        assert "Paris" in text, text
        assert text.isascii() and len(text.split()) >= 3, text  # English words, not noise
        assert usage is not None and usage.completion_tokens == len(pieces)
    finally:
        assert srv.stop() == 0
