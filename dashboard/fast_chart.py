"""A plotly figure drawn by plotly.js's basic bundle in a component frame, for the pages a
browser opens first (Overview, Live).

Why not st.plotly_chart: Streamlit's chart loads the full plotly.js (a 4.7 MB chunk), and a
fresh browser spent most of the Live page's first 7 s parsing it; the basic bundle (scatter,
bar, pie: all these charts use) is 1.2 MB. The figure travels as plotly's own JSON (typed
arrays as base64), the same the Streamlit chart sends."""
from __future__ import annotations

from pathlib import Path

import plotly.io as pio
import streamlit.components.v1 as components

_component = components.declare_component("plotly_basic", path=str(Path(__file__).parent / "plotly_basic"))


def spec(fig) -> str:
    return pio.to_json(fig, validate=False)


def plotly_basic_chart(fig, key: str) -> None:
    """Draw `fig` (scatter and bar traces only) full width, as tall as its layout says (the
    frame sets its own height)."""
    _component(spec=spec(fig), key=key, default=None)
