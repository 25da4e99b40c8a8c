"""ModelRunner: turns a scheduler Batch into one forward pass over the paged KV cache and
samples the next tokens. Also KV export/import for prefill/decode disaggregation."""

from __future__ import annotations

import torch
from torch import Tensor

from gpuprobe.engine.scheduler import Batch
from gpuprobe.engine.sequence import Sequence
from gpuprobe.llama.config import ModelConfig, gguf_path_for, resolve_model
from gpuprobe.llama.transformer import AttentionMetadata, PrefillMeta, Transformer
from gpuprobe.llama.tokenizer import Tokenizer, load_tokenizer
from gpuprobe.llama.weights import build_model


def dtype_bytes(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def kv_bytes_per_token(config: ModelConfig, dtype: torch.dtype) -> int:
    """KV-cache bytes per token position, all layers, K and V."""
    return config.kv_bytes_per_token(dtype_bytes(dtype))


def param_bytes(model: torch.nn.Module) -> int:
    """Bytes of weights a forward pass reads: the parameters (tied weights counted once) and
    the CPU runner's transposed linear weights (cpu_linear.py), once each."""
    return sum(t.numel() * t.element_size() for t in model.parameters()) + sum(
        b.numel() * b.element_size() for n, b in model.named_buffers() if n.endswith("weight_t"))


def blocks_for_budget(config: ModelConfig, budget_bytes: int, block_size: int,
                      dtype: torch.dtype = torch.float32) -> int:
    """How many KV blocks of block_size tokens fit in budget_bytes."""
    return budget_bytes // (kv_bytes_per_token(config, dtype) * block_size)


def load_model(name_or_path: str, device: str | torch.device = "cpu",
               dtype: torch.dtype = torch.float32,
               **overrides) -> tuple[ModelConfig, Transformer, Tokenizer]:
    """Config, weights and tokenizer for a preset name, 'smollm2-135m' or a GGUF path.

    overrides replace config fields (e.g. n_layers=2 for 'llama3-8b-shape').
    """
    path = gguf_path_for(name_or_path)
    if path is None:
        config = resolve_model(name_or_path, **overrides)
        return config, build_model(config, device, dtype), load_tokenizer(None, config.vocab_size)
    from dataclasses import replace

    from gpuprobe.llama.gguf_loader import open_gguf, read_config

    reader = open_gguf(path)  # slow to open: one reader serves config, weights and vocab
    config = replace(read_config(reader, path, name=name_or_path), **overrides)
    return config, build_model(config, device, dtype, reader), load_tokenizer(reader)


def token_generator(seed: int, index: int, device: torch.device) -> torch.Generator:
    """The generator for completion token `index` of a request seeded with `seed`.

    Derived from (seed, index) alone, so a request samples the same tokens whatever batch,
    worker or preemption it goes through.
    """
    return torch.Generator(device=device).manual_seed((seed * 1_000_003 + index) % 2**63)


def sample(logits: Tensor, temperature: float, top_p: float,
           generator: torch.Generator | None) -> int:
    """One token from logits [vocab] (float32): temperature, then nucleus (top_p) sampling."""
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        # Keep the smallest prefix whose mass reaches top_p (always at least one token).
        drop = sorted_probs.cumsum(-1) - sorted_probs >= top_p
        sorted_probs[drop] = 0.0
        return int(order[torch.multinomial(sorted_probs, 1, generator=generator)])
    return int(torch.multinomial(probs, 1, generator=generator))


class ModelRunner:
    """Owns the model and its KV cache [n_layers, 2, num_blocks, block_size, n_kv_heads,
    head_dim]; implements the engine's Runner protocol."""

    def __init__(self, config: ModelConfig, num_blocks: int, block_size: int,
                 device: str | torch.device = "cpu", num_threads: int | None = None,
                 dtype: torch.dtype = torch.float32, model: Transformer | None = None):
        if num_threads:
            torch.set_num_threads(num_threads)
        self.config = config
        self.device = torch.device(device)
        self.block_size = block_size
        self.model = model if model is not None else build_model(config, self.device, dtype)
        if self.device.type == "cpu":
            from gpuprobe.llama.cpu_linear import fuse_gate_up, use_cpu_linears

            fuse_gate_up(self.model)
            use_cpu_linears(self.model)
        with torch.inference_mode():
            self.kv_cache = torch.zeros(config.n_layers, 2, num_blocks, block_size,
                                        config.n_kv_heads, config.head_dim,
                                        dtype=dtype, device=self.device)

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.config, self.kv_cache.dtype)

    @property
    def param_bytes(self) -> int:
        return param_bytes(self.model)

    @torch.inference_mode()
    def run(self, batch: Batch) -> dict[str, int]:
        """Forward the batch; return a sampled token per decode seq and per last chunk."""
        tokens, meta, logits_indices, samplers = self.prepare(batch)
        logits = self.model(tokens, meta, self.kv_cache, logits_indices)
        return self._sample(logits, samplers)

    def prepare(self, batch: Batch) -> tuple[Tensor, AttentionMetadata, Tensor, list[Sequence]]:
        """Flat tokens (decodes first, then chunks), attention metadata, the flat rows to
        compute logits for, and the sequences those rows sample for."""
        dev = self.device
        tokens = [s.last_token_id for s in batch.decode]
        positions = [s.num_computed_tokens for s in batch.decode]
        samplers = list(batch.decode)
        logits_rows = list(range(len(batch.decode)))
        prefills = []
        for c in batch.prefill:
            q_start = len(tokens)
            tokens += c.seq.token_ids[c.start:c.start + c.num_tokens]
            positions += range(c.start, c.start + c.num_tokens)
            span = torch.arange(c.start + c.num_tokens, device=dev)
            ctx_slots = self._slots([c.seq.block_table], span)[0]
            prefills.append(PrefillMeta(q_start, c.num_tokens, c.start, ctx_slots))
            if c.is_last:
                samplers.append(c.seq)
                logits_rows.append(len(tokens) - 1)
        decode_slots, decode_mask, decode_new_slots = self._decode_slots(batch.decode)
        meta = AttentionMetadata(
            positions=torch.tensor(positions, device=dev),
            # Where this step's K/V go: decodes' last slots, then each chunk's own positions.
            slot_mapping=torch.cat([decode_new_slots,
                                    *(p.ctx_slots[p.start_pos:] for p in prefills)]),
            num_decodes=len(batch.decode), decode_slots=decode_slots, decode_mask=decode_mask,
            prefills=tuple(prefills))
        return (torch.tensor(tokens, device=dev), meta,
                torch.tensor(logits_rows, device=dev, dtype=torch.long), samplers)

    def _decode_slots(self, seqs: list[Sequence]) -> tuple[Tensor | None, Tensor | None, Tensor]:
        """Padded context slots [B, max_ctx], the scores' mask [B, 1, 1, max_ctx] (None where
        no row is padded) and each decode token's own slot [B]."""
        if not seqs:
            return None, None, torch.empty(0, dtype=torch.long, device=self.device)
        ctx = [s.num_computed_tokens + 1 for s in seqs]
        span = torch.arange(max(ctx), device=self.device)
        slots = self._slots([s.block_table for s in seqs], span)
        ctx_lens = torch.tensor(ctx, device=self.device)
        mask = None
        if min(ctx) < max(ctx):
            # Additive, built once a step for every layer: attention given a bool mask
            # converts it to this in each of the 30 layers.
            padding = (span.unsqueeze(0) >= ctx_lens.unsqueeze(1))[:, None, None, :]
            mask = torch.zeros(padding.shape, dtype=self.kv_cache.dtype, device=self.device)
            mask.masked_fill_(padding, float("-inf"))
        rows = torch.arange(len(seqs), device=self.device)
        return slots, mask, slots[rows, ctx_lens - 1]

    @torch.inference_mode()
    def export_kv(self, seq: Sequence) -> Tensor:
        """KV of seq's computed positions: [n_layers, 2, num_computed_tokens, n_kv_heads,
        head_dim], contiguous, on this runner's device."""
        slots = self._seq_slots(seq)
        return self._flat_kv()[:, :, slots].contiguous()

    @torch.inference_mode()
    def import_kv(self, seq: Sequence, kv: Tensor) -> None:
        """Write exported KV into seq.block_table's blocks (allocated by add_prefilled)."""
        c = self.config
        want = (c.n_layers, 2, seq.num_computed_tokens, c.n_kv_heads, c.head_dim)
        if tuple(kv.shape) != want:
            raise ValueError(f"{seq.seq_id}: KV shape {tuple(kv.shape)}, expected {want}")
        self._flat_kv()[:, :, self._seq_slots(seq)] = kv.to(self.kv_cache)

    def _flat_kv(self) -> Tensor:
        L, two, nb, bs, h, d = self.kv_cache.shape
        return self.kv_cache.view(L, two, nb * bs, h, d)

    def _seq_slots(self, seq: Sequence) -> Tensor:
        span = torch.arange(seq.num_computed_tokens, device=self.device)
        return self._slots([seq.block_table], span)[0]

    def _slots(self, block_tables: list[list[int]], positions: Tensor) -> Tensor:
        """Flat KV slots of `positions` [P] in each block table -> [len(block_tables), P].

        Tables are padded with block 0; callers mask or never read past a table's end.
        """
        width = max(1, max(len(t) for t in block_tables))
        table = torch.tensor([t + [0] * (width - len(t)) for t in block_tables], device=self.device)
        blocks = positions // self.block_size
        return table[:, blocks.clamp(max=width - 1)] * self.block_size + positions % self.block_size

    def _sample(self, logits: Tensor, samplers: list[Sequence]) -> dict[str, int]:
        greedy = logits.argmax(dim=-1).tolist()
        out = {}
        for row, seq in enumerate(samplers):
            p = seq.params
            if p.temperature == 0:
                out[seq.seq_id] = greedy[row]
                continue
            gen = None if p.seed is None else token_generator(p.seed, seq.num_completion_tokens,
                                                              self.device)
            out[seq.seq_id] = sample(logits[row], p.temperature, p.top_p, gen)
        return out
