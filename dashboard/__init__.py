"""The Streamlit dashboard. Installed as gpuprobe.dashboard."""
