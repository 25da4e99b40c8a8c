"""Every dashboard page over the store `gpuprobe demo` leaves (run by test_demo.py, once): each
page shows that run's data, and no "what is missing, fill it with ..." line names a stage the
demo ran. Only what the demo cannot make may be missing: GPU counters (no NVIDIA GPU on CI),
the autopilot's log (the demo applies once, by hand) and the Fleet page's Prometheus."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

PAGES = Path(__file__).resolve().parent.parent / "dashboard" / "views"
ALERT = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ")  # an alert's local time, then its text
NOT_MADE_BY_THE_DEMO = ("No GPU", "The autopilot has made no decision", "No Prometheus given")


def run_page(name: str, store: Path) -> AppTest:
    os.environ["GPUPROBE_STORE"] = str(store)
    at = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=120).run()
    assert not at.exception, (name, [e.value for e in at.exception])
    errors = [e.value for e in at.error if not ALERT.match(e.value)]  # an alert (its time first) is data
    assert not errors, (name, errors)
    missing = [i.value for i in at.info if "Fill it with" in i.value and not i.value.startswith(NOT_MADE_BY_THE_DEMO)]
    assert not missing, (name, missing)
    return at


def basic_charts(at: AppTest) -> list[dict]:
    """The figures the Overview and Live pages draw with plotly.js's basic bundle (a component)."""
    return [json.loads(json.loads(e.proto.json_args)["spec"]) for e in at.get("component_instance")
            if e.proto.component_name.endswith(".plotly_basic")]


def check_every_page(store: Path, applied_layout: str) -> None:
    """Assert each page's figures from the demo's store; `applied_layout` is the layout its
    server runs after the apply stage (unchanged where it already ran the recommended one)."""
    old = os.environ.get("GPUPROBE_STORE")
    try:
        at = run_page("overview", store)
        m = {x.label: x.value for x in at.metric}
        assert m["Hosts"] == "1" and m["Current layout"] == applied_layout and m["Applied"] == "yes", m
        assert basic_charts(at), "overview: no chart of the last hour"

        at = run_page("live", store)
        (live,) = basic_charts(at)
        titles = [a["text"] for a in live["layout"]["annotations"]]
        for panel in ("Host CPU", "Request rate", "TTFT", "TBT"):  # the agent's counters, the served requests
            assert any(panel in t for t in titles), (panel, titles)
        assert any(s["line"].get("dash") == "dash" for s in live["layout"]["shapes"]), "no layout switch marked"

        at = run_page("workload", store)
        assert "19,366" in [x.value for x in at.metric if x.label == "Requests"]  # azure-conv, imported whole
        assert len(at.get("plotly_chart")) == 6

        at = run_page("accuracy", store)
        assert len(at.dataframe[0].value) >= 2 and at.get("plotly_chart")  # predicted against measured

        at = run_page("forecast", store)
        assert len(at.dataframe[0].value) >= 1 and len(at.dataframe[1].value) >= 2  # models, backtest
        assert at.get("plotly_chart")

        at = run_page("recommend", store)
        m = {x.label: x.value for x in at.metric}
        assert m["Applied"] != "not yet" and len(at.dataframe[0].value) >= 2, m  # ranked candidates
        assert any("Run " in x.value for x in at.markdown)

        at = run_page("reports", store)
        assert {"report.html", "report.pdf"} <= {b.label.split(" ")[0] for b in at.get("download_button")}

        run_page("fleet", store)  # says a Prometheus is needed, as an info line
    finally:
        if old is None:
            os.environ.pop("GPUPROBE_STORE", None)
        else:
            os.environ["GPUPROBE_STORE"] = old
