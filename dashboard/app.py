"""The dashboard's entry point: `gpuprobe dashboard` runs `streamlit run` on this file.

Each page is a script in views/ (not pages/: Streamlit runs a pages/ script on its own, without
this file's navigation and page config, when a browser's first URL names it, e.g. /live); the
store comes from $GPUPROBE_STORE (set by the command)."""
from pathlib import Path

import streamlit as st

HERE = Path(__file__).parent / "views"
PAGES = [("overview.py", "Overview", ":material/dashboard:"), ("live.py", "Live", ":material/monitoring:"),
         ("workload.py", "Workload", ":material/stacked_bar_chart:"), ("accuracy.py", "Accuracy", ":material/rule:"),
         ("forecast.py", "Forecast", ":material/trending_up:"),
         ("recommend.py", "Recommend", ":material/recommend:"), ("reports.py", "Reports", ":material/description:"),
         ("fleet.py", "Fleet", ":material/lan:")]

st.set_page_config(page_title="gpuprobe", page_icon=":material/memory:", layout="wide")
nav = st.navigation([st.Page(HERE / f, title=t, icon=i, default=(f == "overview.py")) for f, t, i in PAGES])
from gpuprobe.dashboard import charts  # noqa: E402,F401 - plotly loads once, with the app, not on the first chart
from gpuprobe.dashboard.common import store_path  # noqa: E402 - after set_page_config

st.sidebar.caption(f"store: `{store_path()}`")
nav.run()
