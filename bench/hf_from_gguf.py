"""Write a Hugging Face model folder (config.json, model.safetensors, tokenizer) from a Llama
GGUF, so vLLM serves the very weights gpuprobe's reference server runs (vLLM 0.32's own GGUF
loader needs CUDA). Runs in gpuprobe's venv: the GGUF is read and dequantized by
gpuprobe.llama, the safetensors file is written here (a JSON header and raw little-endian
arrays), so nothing beyond gpuprobe's own dependencies is needed.

Usage: .venv/bin/python bench/hf_from_gguf.py --model smollm2-135m --out .vllm-models/smollm2-135m
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys


def hf_rotary_rows(w, n_heads: int):
    """GGUF keeps Q and K rows in Meta's interleaved rotary order ((h, i, pair) per head);
    Hugging Face's Llama rotates halves ((h, pair, i)). w: [n_heads * head_dim, dim]."""
    rows, dim = w.shape
    return w.reshape(n_heads, rows // n_heads // 2, 2, dim).transpose(1, 2).reshape(rows, dim)


def hf_state_dict(model, config) -> dict:
    """gpuprobe Transformer parameters under Hugging Face LlamaForCausalLM's names."""
    q_dim, kv_dim = config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim
    sd = {"model.embed_tokens.weight": model.tok_embeddings.weight,
          "model.norm.weight": model.norm.weight}
    if not config.tie_embeddings:
        sd["lm_head.weight"] = model.output.weight
    for i, layer in enumerate(model.layers):
        p, att, ffn = f"model.layers.{i}.", layer.attention, layer.feed_forward
        q, k, v = att.wqkv.weight.split([q_dim, kv_dim, kv_dim])
        sd.update({
            p + "input_layernorm.weight": layer.attention_norm.weight,
            p + "post_attention_layernorm.weight": layer.ffn_norm.weight,
            p + "self_attn.q_proj.weight": hf_rotary_rows(q, config.n_heads),
            p + "self_attn.k_proj.weight": hf_rotary_rows(k, config.n_kv_heads),
            p + "self_attn.v_proj.weight": v,
            p + "self_attn.o_proj.weight": att.wo.weight,
            p + "mlp.gate_proj.weight": ffn.w1.weight,
            p + "mlp.up_proj.weight": ffn.w3.weight,
            p + "mlp.down_proj.weight": ffn.w2.weight})
    return {k: v.detach().float().contiguous() for k, v in sd.items()}


def write_safetensors(path: str, tensors: dict) -> None:
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, t in tensors.items():
        blob = t.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the format pads the header to 8 bytes
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(head)) + head)
        for blob in blobs:
            fh.write(blob)


def hf_config(config) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": config.dim, "intermediate_size": config.hidden_dim,
            "num_hidden_layers": config.n_layers, "num_attention_heads": config.n_heads,
            "num_key_value_heads": config.n_kv_heads, "head_dim": config.head_dim,
            "rms_norm_eps": config.norm_eps, "rope_theta": config.rope_theta,
            "max_position_embeddings": config.max_seq_len, "vocab_size": config.vocab_size,
            "tie_word_embeddings": config.tie_embeddings, "hidden_act": "silu",
            "bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id,
            "torch_dtype": "float32"}


def write_tokenizer(out: str, tok) -> None:
    tok._tok.save(os.path.join(out, "tokenizer.json"))
    name = tok._token
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": name(tok.bos_token_id),
           "eos_token": name(tok.eos_token_id), "add_bos_token": False,
           "clean_up_tokenization_spaces": False, "model_max_length": 1 << 30}
    if tok.chat_template:
        cfg["chat_template"] = tok.chat_template
    with open(os.path.join(out, "tokenizer_config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)


def convert(model_name: str, out: str) -> str:
    from gpuprobe.llama.runner import load_model

    config, model, tok = load_model(model_name)
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), hf_state_dict(model, config))
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(hf_config(config), fh, indent=1)
    with open(os.path.join(out, "generation_config.json"), "w") as fh:
        json.dump({"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id}, fh)
    write_tokenizer(out, tok)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    print(f"wrote {convert(args.model, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
