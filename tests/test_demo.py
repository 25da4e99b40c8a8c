"""`make demo` runs `gpuprobe demo`: it must finish, and say what it found."""
import subprocess
import sys

import pytest


@pytest.mark.timeout(300)
def test_demo_runs_the_pipeline(tmp_path):
    db = tmp_path / "demo" / "gpuprobe.db"
    out = subprocess.run([sys.executable, "-m", "gpuprobe.cli.main", "demo", "--store", str(db)],
                         capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert "requests       8,819" in text and "requests       19,366" in text
    assert "73.4 : 1" in text and "5.5 : 1" in text
    assert text.count("<- best per GPU") == 2
    assert "40/40 requests ok" in text
    assert (db.parent / "layouts.html").stat().st_size > 10_000
