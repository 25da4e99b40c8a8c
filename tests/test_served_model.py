"""What profile --target records of the served model: KV bytes per token from the config's
shape and vLLM's own cache figures, context length, or the flags; never 0 unasked."""
import json
from pathlib import Path

import pytest

from gpuprobe.errors import UserError
from gpuprobe.perf.served_model import describe, engine_cache_bytes_per_token, kv_bytes

FIXTURE = Path(__file__).parent / "fixtures" / "vllm032_metrics.txt"
# SmolLM2-135M as bench/hf_from_gguf.py writes it (what vLLM 0.32 served for the fixture)
SMOLLM2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
           "hidden_size": 576, "head_dim": 64, "torch_dtype": "bfloat16", "max_position_embeddings": 8192}
FORMULA_FP32 = 2 * 30 * 3 * 64 * 4


def test_vllm_cache_figures_give_the_element_size_the_config_the_shape():
    ratio = engine_cache_bytes_per_token(FIXTURE.read_text())
    assert ratio == pytest.approx(1073741824 / 23296)  # kv_cache_memory_bytes / size_tokens
    # served in float32 although the config says bfloat16 (vLLM on a CPU): the cache decides
    assert kv_bytes({}, SMOLLM2, ratio)[0] == FORMULA_FP32 == 46080
    assert kv_bytes({}, SMOLLM2, None) == (FORMULA_FP32 // 2, "config.json (bfloat16)")
    assert abs(kv_bytes({}, None, ratio)[0] / FORMULA_FP32 - 1) < 0.05  # the engine's alone
    assert kv_bytes({"kv_bytes_per_token": 2048}, SMOLLM2, ratio) == (2048, "server (/v1/models)")


def test_describe_reads_a_model_folder_and_asks_for_flags_where_nothing_says(tmp_path):
    folder = tmp_path / "smollm2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(SMOLLM2))
    url = "http://127.0.0.1:9"  # nothing listens: no vLLM cache figures
    entry = {"id": "smollm2-135m", "root": str(folder), "max_model_len": 2048}
    served = describe(url, entry)
    assert (served.model, served.max_model_len, served.kv_bytes_per_token) == ("smollm2-135m", 2048, 23040)
    assert served.kv_source == f"config.json (bfloat16): {folder / 'config.json'}"
    assert describe(url, entry, kv_flag=46080).kv_bytes_per_token == 46080
    with pytest.raises(UserError, match="--kv-bytes-per-token N"):
        describe(url, {"id": "elsewhere/model", "max_model_len": 2048})
    with pytest.raises(UserError, match="--max-model-len N"):
        describe(url, {"id": "m"}, kv_flag=100)
    with pytest.raises(UserError, match="--model-config .*no readable config.json"):
        describe(url, {"id": "m"}, config_path=str(tmp_path / "missing"))
