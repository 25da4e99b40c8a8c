"""Fixtures shared by several test files."""
import os

import pytest
from hypothesis import settings

from gpuprobe.server.launch import start_server

SLOW_TIMEOUT_S = 100  # a test that allows itself this long is slow (`make test-fast` skips it)


# The files that take longest (measured with --durations, 2026-12-06: the demo's run ~170 s,
# validate's ~130 s, the live autopilot ~110 s, then 25-50 s each), run first: `make test`'s two
# workers take a file at a time, and one of these started last is minutes alone at the end.
LONGEST_FIRST = ("test_demo.py", "test_validate.py", "test_autopilot_live.py",
                 "test_fleet_prometheus.py", "test_dashboard_browser.py", "test_recommend.py",
                 "test_cross_remote.py", "test_replay.py", "test_report.py", "test_server_switch.py",
                 "test_server_control.py", "test_gpu_check_dry.py")


def pytest_collection_modifyitems(config, items):
    """Mark slow every test whose timeout is SLOW_TIMEOUT_S or more, so the quick loop
    (`pytest -m "not slow"`, `make test-fast`) needs no list kept by hand; put the longest
    files first (a stable sort: each file's tests keep their order)."""
    for item in items:
        t = item.get_closest_marker("timeout")
        if t and t.args and float(t.args[0]) >= SLOW_TIMEOUT_S:
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))

# Property tests draw the same examples on every run, so CI is reproducible; explore new ones
# locally with HYPOTHESIS_PROFILE=explore (random draws, keeps failures in .hypothesis/).
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session", autouse=True)
def default_store(tmp_path_factory):
    """A command or server a test starts without --store writes to $GPUPROBE_STORE, else
    ./gpuprobe.db: point it at a fresh file, so no test writes into the checkout or reads a
    store an older run left there (a server then fails to start on its schema)."""
    if os.environ.get("GPUPROBE_STORE"):
        yield os.environ["GPUPROBE_STORE"]
        return
    path = str(tmp_path_factory.mktemp("default") / "gpuprobe.db")
    os.environ["GPUPROBE_STORE"] = path
    try:
        yield path
    finally:
        os.environ.pop("GPUPROBE_STORE", None)


@pytest.fixture(scope="module")
def reference_server(tmp_path_factory):
    """URL (without /v1) of a `gpuprobe serve --model tiny` subprocess, one per test module.

    A server that does not start fails the tests that need it (GpuprobeError), never skips them.
    """
    store = tmp_path_factory.mktemp("ref") / "serve.db"
    with start_server("tiny", "monolithic", store=str(store), timeout_s=120) as srv:
        yield srv.url
