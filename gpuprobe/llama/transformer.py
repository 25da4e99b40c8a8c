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

from gpuprobe.llama.config import ModelConfig


def precompute_rope(head_dim: int, max_seq_len: int, theta: float) -> Tensor:
    """cos/sin per position and rotary pair: [max_seq_len, head_dim // 2, 2], float32."""
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float32), freqs)
    return torch.stack([angles.cos(), angles.sin()], dim=-1)


def rope_rotations(rope_rows: Tensor) -> Tensor:
    """Rows of the rope table [T, D // 2, 2] -> each pair's rotation as a complex number,
    [T, 1, D // 2] complex64 (the 1 broadcasts over heads). Built once a step, shared by
    every layer."""
    return torch.view_as_complex(rope_rows.contiguous()).unsqueeze(1)


def apply_rope(x: Tensor, rot: Tensor) -> Tensor:
    """Rotate adjacent pairs (x[2i], x[2i+1]), Meta's layout, which GGUF llama weights use.

    x: [T, H, D]; rot: rope_rotations() of each token's position. A pair times its
    rotation as one complex multiply: one kernel, against the ten a cos/sin formulation
    launches (a sixth of the time; the same values on this CPU).
    """
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))  # [T, H, D/2]
    return torch.view_as_real(pairs * rot).flatten(-2).type_as(x)


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
    # [num_decodes, 1, 1, max_ctx] added to the scores: 0 attend, -inf padding; None when
    # every decode attends its whole row (always at batch 1)
    decode_mask: Tensor | None
    prefills: tuple[PrefillMeta, ...]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, dtype: torch.dtype | None = None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype == torch.float32:  # one fused kernel; the same values as the steps below
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
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
        T, H, D = x.shape[0], self.n_heads, self.head_dim
        qk_dim = (H + self.n_kv_heads) * D
        qkv = self.wqkv(x)
        qk = apply_rope(qkv[:, :qk_dim].view(T, H + self.n_kv_heads, D), rope)  # q and k at once
        q, k = qk[:, :H], qk[:, H:]
        v = qkv[:, qk_dim:].view(T, self.n_kv_heads, D)
        if kv_layer is None:
            out = self._attend(q, k, v, causal=True)
        else:
            out = self._paged(q, k, v, kv_layer, meta)
        return self.wo(out.reshape(T, H * D))

    def _paged(self, q: Tensor, k: Tensor, v: Tensor, kv_layer: Tensor,
               meta: AttentionMetadata) -> Tensor:
        kv = kv_layer.view(2, -1, self.n_kv_heads, self.head_dim)  # [2, slots, Hkv, D]
        k_cache, v_cache = kv[0], kv[1]
        k_cache.index_copy_(0, meta.slot_mapping, k)
        v_cache.index_copy_(0, meta.slot_mapping, v)
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        n = meta.num_decodes
        if n:
            # One padded call for all decodes. index_select on the flat slots, K and V in one
            # call: the same rows as k_cache[decode_slots], which (advanced indexing) took 4x
            # as long on the CPU. The query heads that share a KV head are that head's queries
            # (q [B, Hkv, H / Hkv, D]): a third of the attention kernel's calls, 13% less time
            # at batch 16, than one query per head with enable_gqa.
            kvd = _gather(kv, meta.decode_slots).transpose(2, 3)  # [2, B, Hkv, max_ctx, D]
            qd = q[:n].view(n, self.n_kv_heads, self.n_heads // self.n_kv_heads, self.head_dim)
            od = F.scaled_dot_product_attention(qd, kvd[0], kvd[1], attn_mask=meta.decode_mask)
            out[:n] = od.view(n, self.n_heads, self.head_dim)
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


def _gather(kv: Tensor, slots: Tensor) -> Tensor:
    """kv [2, slots, Hkv, D] at slots [B, S] -> [2, B, S, Hkv, D]."""
    return kv.index_select(1, slots.reshape(-1)).view(2, *slots.shape, *kv.shape[2:])


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x). A runner may replace w1 and w3 with w13, one layer
    whose output is both side by side (cpu_linear.fuse_gate_up: one weight read, one call)."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype | None = None):
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.hidden_dim, bias=False, dtype=dtype)
        self.w3 = nn.Linear(config.dim, config.hidden_dim, bias=False, dtype=dtype)
        self.w2 = nn.Linear(config.hidden_dim, config.dim, bias=False, dtype=dtype)
        self.w13: nn.Module | None = None

    def forward(self, x: Tensor) -> Tensor:
        if self.w13 is not None:
            gate, up = self.w13(x).chunk(2, dim=-1)
            return self.w2(F.silu(gate) * up)
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
        rope = rope_rotations(self.rope[meta.positions])
        for i, layer in enumerate(self.layers):
            x = layer(x, rope, kv_cache[i], meta)
        return self.output(self.norm(x[logits_indices])).float()

    def reference_forward(self, tokens: Tensor) -> Tensor:
        """Dense causal forward of one sequence, no cache. tokens: [S] -> logits [S, vocab]."""
        x = self.tok_embeddings(tokens)
        rope = rope_rotations(self.rope[: tokens.shape[0]])
        for layer in self.layers:
            x = layer(x, rope, None, None)
        return self.output(self.norm(x)).float()
