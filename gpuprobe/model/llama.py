"""Llama-family decoder (gpt-fast style) over a paged KV cache.

The forward takes the flattened tokens of a mixed batch: decodes first, then prefill chunks.
KV lives in blocks: kv_cache [n_layers, 2, num_blocks, block_size, n_kv_heads, head_dim], and
token position p of a sequence sits at slot block_table[p // block_size] * block_size
+ p % block_size of the flattened [num_blocks * block_size] axis.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gpuprobe.model.config import ModelConfig


def precompute_rope(head_dim: int, max_seq_len: int, theta: float) -> Tensor:
    """cos/sin per position and rotary pair: [max_seq_len, head_dim // 2, 2], float32."""
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), freqs)
    return torch.stack([angles.cos(), angles.sin()], dim=-1)


def apply_rope(x: Tensor, rope: Tensor) -> Tensor:
    """Rotate adjacent pairs (x[2i], x[2i+1]), Meta's layout, which GGUF llama weights use.

    x: [T, H, D]; rope: [T, D // 2, 2] for each token's position.
    """
    xs = x.float().reshape(*x.shape[:-1], -1, 2)  # [T, H, D/2, 2]
    rope = rope.unsqueeze(1)  # [T, 1, D/2, 2]
    x0, x1 = xs[..., 0], xs[..., 1]
    cos, sin = rope[..., 0], rope[..., 1]
    out = torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1)
    return out.flatten(-2).type_as(x)


@dataclass(frozen=True)
class PrefillMeta:
    """One prefill chunk: queries [q_start, q_start + q_len) of the flat batch attend to
    KV positions [0, start_pos + q_len) of its sequence, read from ctx_slots."""

    q_start: int
    q_len: int
    start_pos: int
    ctx_slots: Tensor  # [start_pos + q_len] long


@dataclass(frozen=True)
class AttentionMetadata:
    """Where each flat token writes its KV and what each query attends to."""

    positions: Tensor  # [T] long
    slot_mapping: Tensor  # [T] long
    num_decodes: int  # decode tokens are the first num_decodes of the flat batch
    decode_slots: Tensor | None  # [num_decodes, max_ctx] long (padding masked out)
    decode_mask: Tensor | None  # [num_decodes, 1, 1, max_ctx] bool, True = attend
    prefills: tuple[PrefillMeta, ...]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, dtype: torch.dtype | None = None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.type_as(x) * self.weight


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype | None = None):
        super().__init__()
        self.n_heads, self.n_kv_heads = config.n_heads, config.n_kv_heads
        self.head_dim = config.head_dim
        qkv_dim = (config.n_heads + 2 * config.n_kv_heads) * config.head_dim
        self.wqkv = nn.Linear(config.dim, qkv_dim, bias=False, dtype=dtype)
        self.wo = nn.Linear(config.dim, config.dim, bias=False, dtype=dtype)

    def forward(self, x: Tensor, rope: Tensor, kv_layer: Tensor | None,
                meta: AttentionMetadata | None) -> Tensor:
        """x: [T, dim]. kv_layer: [2, num_blocks, block_size, n_kv_heads, head_dim], or None
        for a dense causal pass over x as one sequence (the reference path)."""
        T = x.shape[0]
        q_dim, kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        q, k, v = self.wqkv(x).split([q_dim, kv_dim, kv_dim], dim=-1)
        q = apply_rope(q.view(T, self.n_heads, self.head_dim), rope)
        k = apply_rope(k.view(T, self.n_kv_heads, self.head_dim), rope)
        v = v.view(T, self.n_kv_heads, self.head_dim)
        if kv_layer is None:
            out = self._attend(q, k, v, causal=True)
        else:
            out = self._paged(q, k, v, kv_layer, meta)
        return self.wo(out.reshape(T, q_dim))

    def _paged(self, q: Tensor, k: Tensor, v: Tensor, kv_layer: Tensor,
               meta: AttentionMetadata) -> Tensor:
        k_cache = kv_layer[0].view(-1, self.n_kv_heads, self.head_dim)  # [slots, Hkv, D]
        v_cache = kv_layer[1].view(-1, self.n_kv_heads, self.head_dim)
        k_cache.index_copy_(0, meta.slot_mapping, k)
        v_cache.index_copy_(0, meta.slot_mapping, v)
        out = torch.empty_like(q)
        n = meta.num_decodes
        if n:
            # One padded call for all decodes: q [B, H, 1, D], k/v [B, Hkv, max_ctx, D].
            # index_select on the flat slots: the same rows as k_cache[decode_slots], which
            # (advanced indexing) took 4x as long on the CPU, a sixth of a batch-16 step.
            kd, vd = (_gather(c, meta.decode_slots).transpose(1, 2) for c in (k_cache, v_cache))
            od = F.scaled_dot_product_attention(q[:n].unsqueeze(2), kd, vd,
                                                attn_mask=meta.decode_mask, enable_gqa=True)
            out[:n] = od.squeeze(2)
        for p in meta.prefills:
            rows = slice(p.q_start, p.q_start + p.q_len)
            if p.start_pos == 0:  # the chunk's own K/V are the whole context
                out[rows] = self._attend(q[rows], k[rows], v[rows], causal=True)
            else:
                out[rows] = self._attend(q[rows], k_cache.index_select(0, p.ctx_slots),
                                         v_cache.index_select(0, p.ctx_slots),
                                         causal=False, offset=p.start_pos)
        return out

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, causal: bool, offset: int = 0) -> Tensor:
        """One sequence. q: [Tq, H, D]; k, v: [Tk, Hkv, D]. Query i sits at position offset + i.

        causal: Tq == Tk, plain causal mask; otherwise query i sees keys j <= offset + i.
        """
        mask = None
        if not causal:
            rows = torch.arange(q.shape[0], device=q.device).unsqueeze(1) + offset
            mask = torch.arange(k.shape[0], device=q.device).unsqueeze(0) <= rows
        out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1),
                                             v.transpose(0, 1), attn_mask=mask,
                                             is_causal=causal, enable_gqa=True)
        return out.transpose(0, 1)


def _gather(cache: Tensor, slots: Tensor) -> Tensor:
    """cache [slots, Hkv, D] at slots [B, S] -> [B, S, Hkv, D]."""
    return cache.index_select(0, slots.reshape(-1)).view(*slots.shape, *cache.shape[1:])


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype | None = None):
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.hidden_dim, bias=False, dtype=dtype)
        self.w3 = nn.Linear(config.dim, config.hidden_dim, bias=False, dtype=dtype)
        self.w2 = nn.Linear(config.hidden_dim, config.dim, bias=False, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype | None = None):
        super().__init__()
        self.attention_norm = RMSNorm(config.dim, config.norm_eps, dtype)
        self.attention = Attention(config, dtype)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps, dtype)
        self.feed_forward = FeedForward(config, dtype)

    def forward(self, x: Tensor, rope: Tensor, kv_layer: Tensor | None,
                meta: AttentionMetadata | None) -> Tensor:
        h = x + self.attention(self.attention_norm(x), rope, kv_layer, meta)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype | None = None):
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim, dtype=dtype)
        self.layers = nn.ModuleList(TransformerBlock(config, dtype) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.dim, config.norm_eps, dtype)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False, dtype=dtype)
        self.tie_weights()
        self.register_buffer("rope", torch.empty(0), persistent=False)
        self.reset_rope()

    def tie_weights(self) -> None:
        """Share the embedding with the output projection when the config says so.

        Called again after to_empty(), which gives each module its own new tensor.
        """
        if self.config.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight

    def reset_rope(self) -> None:
        """(Re)compute the rope table on the model's device, e.g. after to_empty()."""
        c = self.config
        device = self.tok_embeddings.weight.device
        if device.type != "meta":
            self.rope = precompute_rope(c.head_dim, c.max_seq_len, c.rope_theta).to(device)

    def forward(self, tokens: Tensor, meta: AttentionMetadata, kv_cache: Tensor,
                logits_indices: Tensor) -> Tensor:
        """tokens: [T] flat batch. Returns float32 logits [len(logits_indices), vocab]."""
        x = self.tok_embeddings(tokens)
        rope = self.rope[meta.positions]
        for i, layer in enumerate(self.layers):
            x = layer(x, rope, kv_cache[i], meta)
        return self.output(self.norm(x[logits_indices])).float()

    def reference_forward(self, tokens: Tensor) -> Tensor:
        """Dense causal forward of one sequence, no cache. tokens: [S] -> logits [S, vocab]."""
        x = self.tok_embeddings(tokens)
        rope = self.rope[: tokens.shape[0]]
        for layer in self.layers:
            x = layer(x, rope, None, None)
        return self.output(self.norm(x)).float()
