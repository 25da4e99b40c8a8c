"""Fixtures shared by several test files."""
import pytest

from gpuprobe.server.launch import start_server


@pytest.fixture(scope="module")
def reference_server(tmp_path_factory):
    """URL (without /v1) of a `gpuprobe serve --model tiny` subprocess, one per test module.

    A server that does not start fails the tests that need it (GpuprobeError), never skips them.
    """
    store = tmp_path_factory.mktemp("ref") / "serve.db"
    with start_server("tiny", "monolithic", store=str(store), timeout_s=120) as srv:
        yield srv.url
