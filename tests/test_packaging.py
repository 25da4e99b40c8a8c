"""The wheel carries every package and the bundled data (an editable install hides misses)."""
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_every_source_folder_is_a_package():
    folders = [d for top in ("gpuprobe", "collectors", "dashboard") for d in (ROOT / top).rglob("*")
               if d.is_dir() and d.name not in ("__pycache__", "data") and any(d.glob("*.py"))]
    missing = [str(d.relative_to(ROOT)) for d in folders if not (d / "__init__.py").exists()]
    assert not missing, f"folders without __init__.py are left out of the wheel: {missing}"


@pytest.mark.timeout(300)
def test_wheel_contents(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stderr[-2000:]
    names = zipfile.ZipFile(next(tmp_path.glob("gpuprobe-*.whl"))).namelist()
    for required in ("gpuprobe/sim/simulator.py", "gpuprobe/collectors/agent.py", "gpuprobe/dashboard/__init__.py", "gpuprobe/dashboard/views/live.py",
                     "gpuprobe/server/layouts/intra.py", "gpuprobe/data/azure_llm_2023_conv.csv",
                     "gpuprobe/data/NOTICE", "gpuprobe/dashboard/plotly_basic/plotly-basic.min.js",
                     "gpuprobe/dashboard/plotly_basic/index.html"):
        assert required in names, required
    assert not any(n.startswith(("collectors/", "dashboard/")) for n in names)
