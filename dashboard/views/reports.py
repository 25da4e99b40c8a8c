"""Reports: generate and download the management report (`gpuprobe report`)."""
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import streamlit as st

from gpuprobe.dashboard.common import cached, local_time, missing, store_path

st.title("Reports")
if importlib.util.find_spec("gpuprobe.cli.commands.report") is None:
    st.warning("The management report is not available in this build (`gpuprobe report` is missing).")
    st.stop()
wls = cached("workloads")
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
recs = cached("recommendations")
workload = st.selectbox("Workload", list(wls["name"]))
rec_ids = [int(x) for x in recs[recs["workload"] == workload]["pk"]]
rec = st.selectbox("Recommendation", ["latest", *rec_ids])
want_pdf = st.checkbox("Also the PDF (printed by chromium; about a minute)", value=False)
if st.button("Generate report", type="primary"):
    out = Path(tempfile.mkdtemp(prefix="gpuprobe-report-")) / "report.html"
    cmd = [sys.executable, "-m", "gpuprobe.cli.main", "report", "--store", store_path(),
           "--workload", workload, "--out", str(out)]
    if rec != "latest":
        cmd += ["--recommendation", str(rec)]
    if want_pdf:
        cmd += ["--pdf", str(out.with_suffix(".pdf"))]
    with st.spinner("gpuprobe report ..."):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not out.exists():
        st.error(f"gpuprobe report failed (exit {done.returncode}): "
                 f"{(done.stderr.strip().splitlines() or ['no message'])[-1]}")
    else:
        pdf = out.with_suffix(".pdf")
        st.session_state["report"] = (out.read_bytes(), pdf.read_bytes() if pdf.exists() else None)
        st.success(f"Written {out}" + (f" and {pdf.name}" if pdf.exists() else ""))
        if "partial" in done.stdout:
            st.warning(done.stdout.strip().splitlines()[-1])
if "report" in st.session_state:
    html_bytes, pdf_bytes = st.session_state["report"]
    st.download_button("Download the report (HTML)", html_bytes, file_name="report.html", mime="text/html")
    if pdf_bytes:
        st.download_button("Download the report (PDF)", pdf_bytes, file_name="report.pdf", mime="application/pdf")
