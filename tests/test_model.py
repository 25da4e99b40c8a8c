import pytest
import torch

from gpuprobe.engine import (LLMEngine, PrefillChunk, SamplingParams, Scheduler, SchedulerConfig,
                             Sequence)
from gpuprobe.engine.scheduler import Batch
from gpuprobe.llama.config import resolve_model
from gpuprobe.llama.runner import ModelRunner, blocks_for_budget, load_model
from gpuprobe.llama.tokenizer import ByteTokenizer, IncrementalDetokenizer

BLOCK = 4  # small blocks so sequences span many of them


@pytest.fixture(scope="module")
def tiny():
    # Other jobs share the 2-core test box; OpenMP threads spinning on a busy core made
    # these tests 30x slower with 2 threads than with 1.
    torch.set_num_threads(1)
    config, model, tokenizer = load_model("tiny")
    return config, model, tokenizer


def make_runner(tiny, num_blocks=256):
    config, model, _ = tiny
    return ModelRunner(config, num_blocks=num_blocks, block_size=BLOCK, model=model)


def prompt(i: int, n: int) -> list[int]:
    return [(i * 37 + j * 11) % 250 for j in range(n)]


def logits_of(runner: ModelRunner, batch: Batch):
    tokens, meta, rows, samplers = runner.prepare(batch)
    return runner.model(tokens, meta, runner.kv_cache, rows), samplers


@torch.inference_mode()
def test_paged_mixed_batches_match_dense_reference(tiny):
    """Chunked prefills and paged decodes sharing steps give the dense forward's logits."""
    runner = make_runner(tiny)
    sched = Scheduler(SchedulerConfig(num_blocks=256, block_size=BLOCK, chunked_prefill_tokens=7))
    for i, n in enumerate([5, 17, 33, 2]):
        sched.add(Sequence(f"s{i}", prompt(i, n), SamplingParams(max_tokens=6, ignore_eos=True)))
    num_checked = mixed = 0
    while sched.has_unfinished():
        batch = sched.schedule()
        mixed += bool(batch.prefill and batch.decode)
        logits, samplers = logits_of(runner, batch)
        for row, seq in zip(logits, samplers):
            ref = runner.model.reference_forward(torch.tensor(seq.token_ids))[-1]
            torch.testing.assert_close(row, ref, atol=1e-4, rtol=1e-4)
            num_checked += 1
        sched.postprocess(batch, {s.seq_id: int(r.argmax()) for r, s in zip(logits, samplers)})
    assert num_checked == 4 * 6 and mixed > 0


@torch.inference_mode()
def test_cpu_runner_fused_layers_give_the_models_logits():
    """The CPU runner's rewrite of a model (w1 and w3 fused into w13; linears read from a
    transposed or oneDNN-packed weight) leaves its logits as they were."""
    config, model, _ = load_model("tiny")
    tokens = torch.tensor(prompt(7, 12))
    before = model.reference_forward(tokens)
    ModelRunner(config, num_blocks=16, block_size=BLOCK, model=model)
    ffn = model.layers[0].feed_forward
    assert ffn.w1 is None and ffn.w3 is None
    assert ffn.w13.weight_t.shape == (config.dim, 2 * config.hidden_dim)
    after = model.reference_forward(tokens)
    torch.testing.assert_close(after, before, atol=1e-5, rtol=1e-5)
    assert torch.equal(after.argmax(-1), before.argmax(-1))


@torch.inference_mode()
def test_chunked_prefill_equals_whole_prefill(tiny):
    tokens = prompt(3, 29)
    results = []
    for chunks in ([29], [8, 8, 8, 5], [1, 27, 1]):
        runner = make_runner(tiny)
        seq = Sequence("s", tokens, SamplingParams())
        Scheduler(SchedulerConfig(num_blocks=256, block_size=BLOCK)).block_manager.allocate(seq, 29)
        start = 0
        for n in chunks:
            logits, _ = logits_of(runner, Batch(prefill=[PrefillChunk(seq, start, n)]))
            seq.num_computed_tokens = start = start + n
        results.append(logits[0])
    torch.testing.assert_close(results[1], results[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(results[2], results[0], atol=1e-4, rtol=1e-4)


def run_all(runner, config: SchedulerConfig, requests: list[Sequence]) -> dict[str, list[int]]:
    engine = LLMEngine(Scheduler(config), runner)
    for seq in requests:
        engine.add_request(seq)
    preempted = 0
    while engine.has_unfinished():
        _, record = engine.step()
        preempted += record.num_preempted if record else 0
    assert engine.scheduler.block_manager.num_used_blocks == 0
    return {s.seq_id: s.completion_token_ids for s in requests}, preempted


def test_tiny_engine_64_concurrent_requests(tiny):
    def requests():
        return [Sequence(f"r{i}", prompt(i, 3 + i % 13), SamplingParams(
            max_tokens=4 + i % 7, ignore_eos=True)) for i in range(64)]

    roomy, _ = run_all(make_runner(tiny), SchedulerConfig(num_blocks=256, block_size=BLOCK),
                       requests())
    assert {k: len(v) for k, v in roomy.items()} == {f"r{i}": 4 + i % 7 for i in range(64)}
    # A cache too small for all 64 forces preemption and recompute: same greedy tokens.
    tight, preempted = run_all(make_runner(tiny, num_blocks=96), SchedulerConfig(
        num_blocks=96, block_size=BLOCK, chunked_prefill_tokens=64), requests())
    assert preempted > 0
    assert tight == roomy


def test_seeded_sampling_does_not_depend_on_the_batch(tiny):
    params = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=8, ignore_eos=True, seed=42)
    alone, _ = run_all(make_runner(tiny), SchedulerConfig(num_blocks=256, block_size=BLOCK),
                       [Sequence("x", prompt(1, 9), params)])
    crowd = [Sequence("x", prompt(1, 9), params)] + [
        Sequence(f"o{i}", prompt(i, 5), SamplingParams(temperature=0.8, max_tokens=8))
        for i in range(5)]
    together, _ = run_all(make_runner(tiny), SchedulerConfig(num_blocks=256, block_size=BLOCK),
                          crowd)
    assert together["x"] == alone["x"]


def test_export_import_kv_round_trip(tiny):
    """Prefill on one runner, move the KV, decode on another: same tokens as one runner."""
    config = tiny[0]
    params = SamplingParams(max_tokens=10, ignore_eos=True)
    tokens = prompt(5, 21)
    reference, _ = run_all(make_runner(tiny), SchedulerConfig(num_blocks=256, block_size=BLOCK),
                           [Sequence("s", tokens, params)])

    p_runner, d_runner = make_runner(tiny), make_runner(tiny, num_blocks=64)
    prefill = LLMEngine(Scheduler(SchedulerConfig(num_blocks=256, block_size=BLOCK,
                                                  role="prefill")), p_runner)
    decode = LLMEngine(Scheduler(SchedulerConfig(num_blocks=64, block_size=BLOCK,
                                                 role="decode")), d_runner)
    decode.scheduler.block_manager.allocate(Sequence("pad", [0] * 9, params), 9)  # other blocks
    prefill.add_request(Sequence("s", tokens, params))
    prefill.step()
    [seq] = prefill.scheduler.pop_prefilled()
    kv = p_runner.export_kv(seq)
    assert kv.shape == (config.n_layers, 2, 21, config.n_kv_heads, config.head_dim)
    assert kv.is_contiguous()
    prefill.scheduler.release(seq)

    moved = Sequence.from_prefilled("s", tokens, seq.completion_token_ids[0], params)
    assert decode.scheduler.add_prefilled(moved)
    d_runner.import_kv(moved, kv)
    torch.testing.assert_close(d_runner.export_kv(moved), kv, atol=0, rtol=0)
    while decode.has_unfinished():
        decode.step()
    assert moved.completion_token_ids == reference["s"]
    with pytest.raises(ValueError, match="KV shape"):
        d_runner.import_kv(moved, kv[:, :, :3])


def test_budget_helper_and_big_preset_shape():
    tiny_cfg = resolve_model("tiny")
    per_token = tiny_cfg.kv_bytes_per_token(4)
    assert blocks_for_budget(tiny_cfg, 10 * 16 * per_token, 16) == 10
    big = resolve_model("llama3-8b-shape")  # shape only: never instantiated on CPU
    assert 8.0e9 < big.num_params < 8.1e9
    assert big.kv_bytes_per_token(2) == 128 * 1024
    assert resolve_model("llama3-8b-shape", n_layers=2).n_layers == 2
    with pytest.raises(ValueError, match="unknown model"):
        resolve_model("no-such-model")


def test_byte_tokenizer_and_incremental_detokenizer():
    tok = ByteTokenizer(512)
    text = "naïve 😀 ok"
    assert tok.decode(tok.encode(text)) == text
    detok = IncrementalDetokenizer(tok)
    deltas = [detok.add(i) for i in tok.encode(text)]
    assert "".join(deltas) == text
    assert "\ufffd" not in "".join(deltas) and deltas[7:10] == ["", "", ""]
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert tok.decode(chat, skip_special_tokens=False) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
