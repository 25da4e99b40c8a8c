"""Data only: the plotly.js basic bundle and the frame fast_chart.py serves it in."""
