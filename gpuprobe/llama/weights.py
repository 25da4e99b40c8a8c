"""Build a Transformer with weights: from a GGUF checkpoint or random from a fixed seed."""

from __future__ import annotations

import torch

from gpuprobe.llama.config import ModelConfig
from gpuprobe.llama.transformer import Transformer


def build_model(config: ModelConfig, device: str | torch.device = "cpu",
                dtype: torch.dtype = torch.float32, reader=None) -> Transformer:
    """A Transformer on `device` in eval mode.

    reader: an open GGUFReader for config.gguf_path, if the caller already has one.
    """
    # Built on the meta device first: no time or memory spent on weights replaced next.
    with torch.device("meta"):
        model = Transformer(config, dtype=dtype)
    model.to_empty(device=device)
    model.tie_weights()
    if config.gguf_path is None:
        init_random(model, config.seed)
    else:
        from gpuprobe.llama import gguf_loader

        reader = reader or gguf_loader.open_gguf(config.gguf_path)
        model.load_state_dict(gguf_state_dict(gguf_loader.read_tensors(reader), config))
    model.reset_rope()
    return model.eval().requires_grad_(False)


@torch.no_grad()
def init_random(model: Transformer, seed: int) -> None:
    """Deterministic weights: unit-variance embeddings, 1/sqrt(fan_in) linears, unit norms.

    Scaled so activations and logits stay O(1); greedy decoding then has clear winners,
    which keeps equality tests between attention paths from hinging on float noise.
    """
    gen = torch.Generator(device=model.tok_embeddings.weight.device).manual_seed(seed)
    for name, param in model.named_parameters():  # tied weights are listed once
        if name.endswith("norm.weight"):
            param.fill_(1.0)
        elif name == "tok_embeddings.weight":
            param.normal_(0.0, 1.0, generator=gen)
        else:
            param.normal_(0.0, param.shape[1] ** -0.5, generator=gen)


def gguf_state_dict(tensors: dict, config: ModelConfig) -> dict[str, torch.Tensor]:
    """Map llama.cpp tensor names (blk.N.attn_q ...) to this Transformer's parameters."""
    t = {name: torch.from_numpy(array) for name, array in tensors.items()}
    sd = {
        "tok_embeddings.weight": t["token_embd.weight"],
        "norm.weight": t["output_norm.weight"],
        "output.weight": t["token_embd.weight" if config.tie_embeddings else "output.weight"],
    }
    for i in range(config.n_layers):
        b, p = f"blk.{i}.", f"layers.{i}."
        sd[p + "attention_norm.weight"] = t[b + "attn_norm.weight"]
        sd[p + "attention.wqkv.weight"] = torch.cat(
            [t[b + "attn_q.weight"], t[b + "attn_k.weight"], t[b + "attn_v.weight"]])
        sd[p + "attention.wo.weight"] = t[b + "attn_output.weight"]
        sd[p + "ffn_norm.weight"] = t[b + "ffn_norm.weight"]
        sd[p + "feed_forward.w1.weight"] = t[b + "ffn_gate.weight"]
        sd[p + "feed_forward.w3.weight"] = t[b + "ffn_up.weight"]
        sd[p + "feed_forward.w2.weight"] = t[b + "ffn_down.weight"]
    return sd
