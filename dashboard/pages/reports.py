"""Reports: generate and download the management report (`gpuprobe report`)."""
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import streamlit as st

from gpuprobe.dashboard.common import cached, missing, store_path

st.title("Reports")
if importlib.util.find_spec("gpuprobe.cli.commands.report") is None:
    st.warning("The management report is not available in this build (`gpuprobe report` is missing).")
    st.stop()
wls = cached("workloads")
if wls.empty:
    missing("A report needs a workload.", "gpuprobe import gpuprobe/data/azure_llm_2023_conv.csv --name azure-conv")
    st.stop()
recs = cached("recommendations")
workload = st.selectbox("Workload", list(wls["name"]))
rec_ids = [int(x) for x in recs[recs["workload"] == workload]["pk"]]
rec = st.selectbox("Recommendation", ["latest", *rec_ids])
if st.button("Generate report", type="primary"):
    out = Path(tempfile.mkdtemp(prefix="gpuprobe-report-")) / "report.html"
    cmd = [sys.executable, "-m", "gpuprobe.cli.main", "report", "--store", store_path(),
           "--workload", workload, "--out", str(out)]
    if rec != "latest":
        cmd += ["--recommendation", str(rec)]
    with st.spinner("gpuprobe report ..."):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not out.exists():
        st.error(f"gpuprobe report failed (exit {done.returncode}): "
                 f"{(done.stderr.strip().splitlines() or ['no message'])[-1]}")
    else:
        st.session_state["report"] = (out.name, out.read_bytes())
        st.success(f"Written {out}")
if "report" in st.session_state:
    name, data = st.session_state["report"]
    st.download_button("Download the report (HTML)", data, file_name=name, mime="text/html")
