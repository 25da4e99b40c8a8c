"""One short end-to-end validate run: JSON shape and finite errors."""
import json
import math

import pytest

pytest.importorskip("gpuprobe.server.launch", reason="reference server not available")
pytest.importorskip("gpuprobe.workloads.replay", reason="replay not available")


@pytest.mark.timeout(150)
def test_short_validate_run_has_the_documented_shape():
    from gpuprobe.perf.metrics import Slo
    from gpuprobe.perf.validate import COMPARED, ValidateOptions, run_validate

    import pandas as pd
    from gpuprobe.workloads.loading import bundled_trace
    raw = pd.read_csv(bundled_trace("azure-conv"), nrows=40)
    ts = pd.to_datetime(raw["TIMESTAMP"])
    wl = pd.DataFrame({"arrival_s": (ts - ts.iloc[0]).dt.total_seconds(),
                       "prompt_tokens": raw["ContextTokens"], "output_tokens": raw["GeneratedTokens"]})
    opts = ValidateOptions(layouts=("monolithic", "intra"), limit=16, token_scale=0.05,
                           slo=Slo(1.0, 0.1),
                           calibration=(("prefill_sizes", (16, 32, 64, 128, 256)), ("reps", 1),
                                        ("decode_batches", (1, 2, 4, 8, 16)), ("decode_prompts", (32,)),
                                        ("decode_tokens", 8)))
    out = run_validate(wl, opts, progress=False)
    doc = json.loads(json.dumps({k: v for k, v in out.items() if k != "profile"}, default=float))
    assert {"rows", "best_measured", "best_predicted", "slo"} <= set(doc)
    assert len(doc["rows"]) == 2 * len(COMPARED)
    for r in doc["rows"]:
        assert set(r) == {"layout", "metric", "predicted", "measured", "rel_error"}
        if r["metric"] in ("ttft_p50_s", "throughput_tok_s"):
            assert r["rel_error"] is not None and math.isfinite(r["rel_error"])
    assert doc["best_measured"] in ("monolithic", "intra")
    assert doc["best_predicted"] in ("monolithic", "intra")
