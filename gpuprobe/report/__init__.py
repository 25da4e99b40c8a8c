"""The management report: one HTML file (plotly embedded, opens offline) and its PDF.

    from gpuprobe.report import write_report
    result = write_report(store, "azure-conv", "report.html", pdf="report.pdf",
                          rec_id=None, cost_per_device_hour=3.5)

evidence.py gathers what the store holds (nothing is invented for what it lacks), memo.py
writes page one, figures.py the plots, render.py the HTML, pdf.py prints it with Chromium.
"""
from __future__ import annotations

from pathlib import Path


def write_report(store, workload: str, out: str, pdf: str | None = None, rec_id: int | None = None,
                 cost_per_device_hour: float | None = None, progress=None, source=None,
                 source_range: tuple[float, float] | None = None) -> dict:
    """Write the HTML (and the PDF when asked). Returns {'html', 'pdf', 'partial', 'missing',
    'sentence'}; a PDF that cannot be printed raises GpuprobeError after the HTML is written."""
    from gpuprobe.report.evidence import gather
    from gpuprobe.report.memo import memo
    from gpuprobe.errors import GpuprobeError
    from gpuprobe.report.pdf import INSTALL, find_chromium, html_to_pdf
    from gpuprobe.report.render import render

    say = progress or (lambda m: None)
    say("gathering the evidence")
    ev = gather(store, workload, rec_id, cost_per_device_hour, source, source_range)
    ev["current_layout"] = _layout_before(store.layout_events(), ev["recommendation"])
    say("writing the HTML")
    _atomic(out, render(ev, interactive=True))
    result = {"html": str(Path(out).resolve()), "pdf": None, "partial": bool(ev["missing"]),
              "missing": [w for w, _ in ev["missing"]], "sentence": memo(ev)["sentence"]}
    if pdf:
        if find_chromium() is None:  # kaleido needs it too, for the PDF's images
            raise GpuprobeError(f"no chromium for the PDF (install it: {INSTALL}); the HTML was written")
        say("drawing the plots as images (kaleido) and printing the PDF (chromium)")
        html_to_pdf(render(ev, interactive=False), pdf)
        result["pdf"] = str(Path(pdf).resolve())
    return result


def partial_note(result: dict) -> str | None:
    """The line that says what a report written by write_report lacks, or None when whole."""
    if not result["partial"]:
        return None
    return f"partial: missing {', '.join(result['missing'])} (the report names the commands that fill them)"


def _layout_before(layouts, rec) -> str | None:
    """The layout to compare with: the one the recommendation replaced where it was applied
    (after apply the layout running now is the recommendation itself), else the one running."""
    if not len(layouts):
        return None
    if rec is not None and rec.applied_s:
        switch = layouts[layouts["reason"] == f"recommendation {rec.id}"]
        if len(switch) and switch["from_layout"].iloc[0]:
            return str(switch["from_layout"].iloc[0])
    return str(layouts["to_layout"].iloc[-1])


def _atomic(path: str, text: str) -> None:
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(p)
