"""Fixtures shared by several test files."""
import os

import pytest
from hypothesis import settings

from gpuprobe.server.launch import start_server

SLOW_TIMEOUT_S = 100  # a test that allows itself this long is slow (`make test-fast` skips it)


def pytest_collection_modifyitems(config, items):
    """Mark slow every test whose timeout is SLOW_TIMEOUT_S or more, so the quick loop
    (`pytest -m "not slow"`, `make test-fast`) needs no list kept by hand."""
    for item in items:
        t = item.get_closest_marker("timeout")
        if t and t.args and float(t.args[0]) >= SLOW_TIMEOUT_S:
            item.add_marker(pytest.mark.slow)

# Property tests draw the same examples on every run, so CI is reproducible; explore new ones
# locally with HYPOTHESIS_PROFILE=explore (random draws, keeps failures in .hypothesis/).
settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="module")
def reference_server(tmp_path_factory):
    """URL (without /v1) of a `gpuprobe serve --model tiny` subprocess, one per test module.

    A server that does not start fails the tests that need it (GpuprobeError), never skips them.
    """
    store = tmp_path_factory.mktemp("ref") / "serve.db"
    with start_server("tiny", "monolithic", store=str(store), timeout_s=120) as srv:
        yield srv.url
