"""The PDF: the static HTML (plots as PNG) printed by headless Chromium.

Chromium and not weasyprint: kaleido already drives Debian's chromium for the PNGs, so one
browser renders both (the same fonts and CSS as the HTML a manager opens), and weasyprint would
add Pango and Cairo to the install for a second CSS engine."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from gpuprobe.errors import GpuprobeError

INSTALL = "apt-get install -y --no-install-recommends chromium"


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


def html_to_pdf(static_html: str, out: str, timeout_s: float = 120.0) -> None:
    """Print the HTML to `out` (A4, no header or footer). GpuprobeError with the install line
    when there is no chromium, or with chromium's last words when it fails."""
    browser = find_chromium()
    if browser is None:
        raise GpuprobeError(f"no chromium for the PDF (install it: {INSTALL}); the HTML was written")
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(static_html)
        target = Path(out).resolve()
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
               f"--user-data-dir={tmp}/profile", f"--print-to-pdf={target}", page.as_uri()]
        try:
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                 env={**os.environ, "HOME": tmp})
        except subprocess.TimeoutExpired:
            raise GpuprobeError(f"chromium did not print the PDF within {timeout_s:.0f} s") from None
        if run.returncode != 0 or not target.exists():
            last = (run.stderr.strip().splitlines() or ["no output"])[-1]
            raise GpuprobeError(f"chromium could not print the PDF: {last}")
