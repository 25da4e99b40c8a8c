"""bench/gpu_check.sh runs on a lent GPU only a few minutes a task, so its plumbing is checked
here without one: DEVICE=cpu MODEL=tiny, the machine part, the three layouts side by side, and
the TP sweep at TP2 (two processes, gloo) at toy sizes."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run_serves_every_layout(tmp_path):
    env = {**os.environ, "DEVICE": "cpu", "MODEL": "tiny", "PY": sys.executable,
           "WHEELS": "0",  # this checkout's code, not wheels made for a device run
           "TP_SIZES": "2"}  # TP1 runs the same code in one process
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), str(out), "0", "8", "3"],
                          env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    log = (out / "check.txt").read_text()
    assert "layouts that served: monolithic,intra,cross" in log, log[-2000:]
    for layout in ("monolithic", "intra", "cross"):
        assert f"[{layout}] ready in" in log and f"=== smoke_{layout}: rc 0" in log
    assert "completion_tokens': 64" in log
    assert "gpuprobe_kv_handoff_seconds_count" in log  # the split layouts handed a KV over
    assert (out / "logs.tgz").stat().st_size > 0
    # two ranks sharded the model and wrote their steps; no profile here: the table says n/a
    assert "=== tp_sweep_tp2: rc 0" in log and "tiny TP2 on cpu" in log
    steps = json.loads((out / "tp_sweep_tp2.json").read_text())
    assert steps["tp"] == 2 and [r["batch"] for r in steps["decode"]] == [2]
    assert steps["prefill"][0]["prompt_tokens"] == 16 and steps["prefill"][0]["step_s"] > 0
