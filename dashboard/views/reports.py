"""Reports: generate and download the management report (what `gpuprobe report` writes, through
the same library call, gpuprobe.report.write_report)."""
import tempfile
from pathlib import Path

import streamlit as st

from gpuprobe.dashboard import queries
from gpuprobe.dashboard.common import cached, local_time, missing, store_path
from gpuprobe.errors import GpuprobeError
from gpuprobe.report import partial_note, write_report
from gpuprobe.store import Store

st.title("Reports")
wls = cached(queries.workloads)
if wls.empty:
    missing("A report needs a workload.", "gpuprobe import gpuprobe/data/azure_llm_2023_conv.csv --name azure-conv")
    st.stop()
written = sorted((p for ext in ("html", "pdf") for p in Path(store_path()).parent.glob(f"report*.{ext}")),
                 key=lambda p: p.stat().st_mtime, reverse=True)
if written:  # e.g. the demo's, beside its store: readable before generating anything
    st.subheader("Reports beside the store")
    for i, path in enumerate(written):
        when = local_time(path.stat().st_mtime, "%Y-%m-%d %H:%M %Z")
        st.download_button(f"{path.name} ({path.stat().st_size / 2**20:.1f} MiB, written {when})",
                           path.read_bytes(), file_name=path.name, key=f"written{i}",
                           mime="application/pdf" if path.suffix == ".pdf" else "text/html")
    st.subheader("A new report")
recs = cached(queries.recommendations)
workload = st.selectbox("Workload", list(wls["name"]))
rec_ids = [int(x) for x in recs[recs["workload"] == workload]["pk"]]
rec = st.selectbox("Recommendation", ["latest", *rec_ids])
want_pdf = st.checkbox("Also the PDF (printed by chromium; about a minute)", value=False)
if st.button("Generate report", type="primary"):
    out = Path(tempfile.mkdtemp(prefix="gpuprobe-report-")) / "report.html"
    pdf = out.with_suffix(".pdf")
    try:
        # a store of its own: the page's shared one is held by the other sessions' reads
        with st.spinner("writing the report ..."), Store.open(store_path(), read_only=True) as store:
            result = write_report(store, workload, str(out), str(pdf) if want_pdf else None,
                                  None if rec == "latest" else int(rec))
    except GpuprobeError as exc:  # one line; a PDF that failed still leaves the HTML to download
        st.error(f"The report was not written{' as a PDF' if out.exists() else ''}: {exc}")
        result = None
    if out.exists():
        st.session_state["report"] = (out.read_bytes(), pdf.read_bytes() if pdf.exists() else None)
    if result is not None:
        st.success(f"Written {out}" + (f" and {pdf.name}" if pdf.exists() else ""))
        if partial_note(result):
            st.warning(partial_note(result))
if "report" in st.session_state:
    html_bytes, pdf_bytes = st.session_state["report"]
    st.download_button("Download the report (HTML)", html_bytes, file_name="report.html", mime="text/html")
    if pdf_bytes:
        st.download_button("Download the report (PDF)", pdf_bytes, file_name="report.pdf", mime="application/pdf")
