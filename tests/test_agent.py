"""The agent: real subprocesses (SIGTERM, SIGKILL, a locked store, beside the reference
server) and in-process runs with the fake GPU, failing scrape targets and a full store."""
import asyncio
import json
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from aiohttp import web
from fake_nvml import FakeNvml
from waiting import wait_for
from gpuprobe.collectors import config
from gpuprobe.collectors.agent import Agent
from gpuprobe.collectors.loop import every

from gpuprobe.errors import UserError
from gpuprobe.server.kv_transfer import free_port
from gpuprobe.store import Store

AGENT = [sys.executable, "-m", "gpuprobe.cli.main", "agent", "--metrics-port", "0"]


def start_agent(*args):
    proc = subprocess.Popen(AGENT + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    m = re.search(r":(\d+)/metrics", line)
    assert m, line
    return proc, f"http://127.0.0.1:{m.group(1)}/metrics"


def counters(metrics_url):
    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(gpuprobe_agent_\w+) (\S+)$", text, re.M)}, text


def summary(out):
    m = re.search(r"produced (\d+) samples, wrote (\d+), dropped (\d+), unwritten at exit (\d+)", out)
    assert m, out
    return tuple(int(x) for x in m.groups())


def num_rows(path):
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0]


@pytest.mark.timeout(60)
def test_sigterm_flushes_everything_and_exits_0(tmp_path):
    db = tmp_path / "a.db"
    proc, url = start_agent("--store", str(db), "--interval-host", "0.2", "--flush-interval", "60")
    try:
        # the first flush runs at start; the next is a minute away, so the samples wait in memory
        wait_for(lambda: (c := counters(url)[0])["gpuprobe_agent_samples_total"]
                 > c["gpuprobe_agent_written_samples_total"] + 50, "50 samples in memory")
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, out
    assert "no NVIDIA driver found: GPU sampling off" in out
    produced, written, dropped, left = summary(out)
    assert produced == written == num_rows(db) > 0 and dropped == left == 0


def _listening_on(pid: int) -> set[str]:
    import psutil
    return {c.laddr.ip for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN}


@pytest.mark.timeout(60)
def test_metrics_listen_on_this_host_only_unless_widened(tmp_path):
    """With no flags (but a free port, not 9400, which another agent may hold) the agent's
    /metrics is on 127.0.0.1 alone; --listen widens it on purpose."""
    assert config.load(None, {}).listen == "127.0.0.1"
    for extra, want in (([], {"127.0.0.1"}), (["--listen", "0.0.0.0"], {"0.0.0.0"})):
        proc = subprocess.Popen([sys.executable, "-m", "gpuprobe.cli.main", "agent", "--metrics-port", "0",
                                 *extra], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        try:
            line = proc.stdout.readline()
            assert f"serving /metrics on http://{min(want)}:" in line, line
            assert _listening_on(proc.pid) == want
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)
        assert proc.returncode == 0


@pytest.mark.timeout(60)
def test_sigkill_loses_at_most_one_flush_interval(tmp_path):
    db, flush_s, host_s = tmp_path / "a.db", 0.5, 0.1
    started = time.monotonic()
    proc, url = start_agent("--store", str(db), "--interval-host", str(host_s), "--flush-interval", str(flush_s))
    try:
        # a few flushes done, so the buffer holds one interval's samples, not the start's
        wait_for(lambda: counters(url)[0]["gpuprobe_agent_written_samples_total"] > 0 and
                 time.monotonic() - started > 4 * flush_s, "a flush")
        t0 = time.monotonic()
        seen, _ = counters(url)
        proc.kill()
        killed_after_s = time.monotonic() - t0
    finally:
        proc.kill()
        proc.wait(timeout=10)
    rows = num_rows(db)
    produced = seen["gpuprobe_agent_samples_total"]
    rate = produced / (t0 - started)  # samples per second as this machine ran it (a lower bound)
    assert rows >= seen["gpuprobe_agent_written_samples_total"]  # nothing confirmed was lost
    # lost: what was buffered when looked at (at most a flush interval's worth, with room for
    # a late flush on a busy machine) and what came after
    buffered = seen["gpuprobe_agent_buffered_samples"]
    assert buffered <= rate * 3 * (flush_s + host_s) + 40, (buffered, rate)
    assert produced - rows <= buffered + rate * 3 * (host_s + killed_after_s) + 40, (produced, rows)


@pytest.mark.timeout(60)
def test_store_locked_buffers_then_drops_oldest_without_crashing(tmp_path):
    db = tmp_path / "a.db"
    Store.open(db).close()
    proc, url = start_agent("--store", str(db), "--interval-host", "0.1", "--flush-interval", "0.2",
                            "--max-buffer", "30")
    lines: list[str] = []  # the agent's output as it comes: the test waits on what it says
    reader = threading.Thread(target=lambda: [lines.append(ln) for ln in proc.stdout], daemon=True)
    reader.start()
    said = lambda text: any(text in ln for ln in lines)  # noqa: E731
    locker = sqlite3.connect(db, isolation_level=None)
    try:
        wait_for(lambda: counters(url)[0]["gpuprobe_agent_written_samples_total"] > 0, "a write")
        locker.execute("BEGIN EXCLUSIVE")
        wait_for(lambda: said("store:"), "the agent finding the store locked")
        before = counters(url)[0]["gpuprobe_agent_dropped_samples_total"]
        during = wait_for(lambda: (c := counters(url)[0])["gpuprobe_agent_dropped_samples_total"] > before
                          and c, "samples dropped while the store is locked")
        locker.execute("COMMIT")
        wait_for(lambda: said("writable again"), "the store writable again")
        after = counters(url)[0]
    finally:
        locker.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        reader.join(10)
    out = "".join(lines)
    assert proc.returncode == 0, out
    assert during["gpuprobe_agent_dropped_samples_total"] > 0
    assert during["gpuprobe_agent_buffered_samples"] <= 30
    assert after["gpuprobe_agent_written_samples_total"] > during["gpuprobe_agent_written_samples_total"]
    assert sum(ln.startswith("store:") and "locked" in ln for ln in out.splitlines()) == 1, out
    assert "writable again" in out  # said once, not once per flush
    produced, written, dropped, left = summary(out)
    assert produced == written + dropped + left and written == num_rows(db)


def test_store_full_keeps_a_bounded_buffer(tmp_path):
    with Store.open(tmp_path / "a.db") as store:
        pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
        store._conn.execute(f"PRAGMA max_page_count = {pages}")  # a full disk, as SQLite sees one
        cfg = config.AgentConfig(metrics_port=None, flush_interval=0.1, max_buffer_samples=25,
                                 duration=1.0, intervals=config.Intervals(host=0.05, nvml=0, gpm=0, proc=0))
        logs = []
        stats = asyncio.run(Agent(cfg, store, log=logs.append).run())  # fills up after a few writes
        rows = store._conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    assert stats.num_dropped > 0 and stats.num_buffered <= 25
    assert stats.num_produced == stats.num_written + stats.num_dropped + stats.num_buffered
    assert rows == stats.num_written
    store_logs = [m for m in logs if m.startswith("store:")]
    assert len(store_logs) == 1 and "full" in store_logs[0]


class BadTargets:
    async def garbage(self, request):
        return web.Response(text="\x00\x01 not metrics {{{")

    async def slow(self, request):
        await asyncio.sleep(1.5)
        return web.Response(text="")


@pytest.mark.timeout(60)
def test_failing_targets_do_not_disturb_other_sources(tmp_path):
    async def main():
        bad = BadTargets()
        app = web.Application()
        app.router.add_get("/garbage", bad.garbage)
        app.router.add_get("/slow", bad.slow)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        urls = (base + "/garbage", base + "/slow", f"http://127.0.0.1:{free_port()}/metrics")
        cfg = config.AgentConfig(metrics_port=None, flush_interval=0.5, duration=3.0, scrape=urls,
                                 intervals=config.Intervals(host=0.1, scrape=0.1, nvml=0, gpm=0, proc=0))
        logs = []
        try:
            with Store.open(tmp_path / "a.db") as store:
                stats = await Agent(cfg, store, log=logs.append).run()
                host_ts = store.samples("mem_total_bytes", source="host").ts_s
        finally:
            await runner.cleanup()
        return stats, host_ts, logs

    stats, host_ts, logs = asyncio.run(main())
    # the slow target never held the host loop up: held, it would tick once per 1.5 s answer
    # (bounds a busy machine meets: ~30 ticks in 3 s at 0.1 s, gaps of 0.1 s)
    assert len(host_ts) >= 10 and host_ts.diff().max() < 1.2, host_ts.diff().max()
    for kind in ("garbage", "slow", "down"):
        assert sum(f": {kind}:" in m for m in logs) == 1, logs  # once per change of state


@pytest.mark.timeout(60)
def test_fake_gpu_rows_and_metrics_endpoint_labels(tmp_path):
    async def main():
        cfg = config.AgentConfig(metrics_port=0, flush_interval=0.2, duration=0,
                                 intervals=config.Intervals(nvml=0.1, gpm=0.15, proc=0.2, host=0.2))
        fake = FakeNvml(2, lose_gpu={1: 5}, processes={0: [(99, 2**30)]})
        with Store.open(tmp_path / "a.db") as store:
            agent = Agent(cfg, store, nvml=fake, log=lambda m: None, host="node7")
            task = asyncio.create_task(agent.run())
            def seen():  # GPU 1 lost (its 5th read) and recorded, GPU 0 sampled on after it
                sm = store.samples("sm_util_pct")
                return agent.metrics_port is not None and not store.events().empty and \
                    (sm.device == "gpu0").sum() > (sm.device == "gpu1").sum()
            deadline = time.monotonic() + 30
            while not seen() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            url = f"http://127.0.0.1:{agent.metrics_port}/metrics"
            text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
            agent.stop()
            await task
            return text, store.samples("sm_util_pct"), store.events()

    text, sm, events = asyncio.run(main())
    assert 'gpuprobe_gpu_sm_util_pct{gpu="0",hostname="node7",uuid="GPU-fake-0000"} 70.0' in text
    assert 'gpuprobe_gpu_power_w{gpu="0",hostname="node7",uuid="GPU-fake-0000"} 350.5' in text
    assert "gpuprobe_agent_dropped_samples_total 0.0" in text
    assert set(sm.device) == {"gpu0", "gpu1"} and (sm.device == "gpu0").sum() > (sm.device == "gpu1").sum()
    assert events.kind.tolist() == ["gpu_lost"]


class FakeTime:
    """A clock and a sleep for `every`: time moves only when a tick costs or the loop sleeps."""

    def __init__(self):
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_drift_free_loop():
    t, ticks, costs = FakeTime(), [], [0.02] * 5 + [0.23] + [0.02] * 3

    async def tick():
        ticks.append(round(t.now, 6))
        t.now += costs[len(ticks) - 1]  # 40% of the interval; the 6th more than four intervals
        if len(ticks) == len(costs):
            raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(every(0.05, tick, clock=t.clock, sleep=t.sleep))
    # on the grid, not every 0.07 s as with sleep(interval) after each tick; the late tick
    # skips ahead instead of firing a burst of catch-up ticks
    assert ticks == [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.48, 0.53, 0.58]


def test_config_file_and_flags(tmp_path):
    path = tmp_path / "agent.toml"
    path.write_text('[agent]\nscrape = ["http://x/metrics"]\nflush_interval = 2\n[intervals]\nhost = 0.5\n')
    cfg = config.load(path, {"flush_interval": 3.0, "interval_scrape": 10, "store": None})
    assert cfg.scrape == ("http://x/metrics",) and cfg.flush_interval == 3.0
    assert cfg.intervals.host == 0.5 and cfg.intervals.scrape == 10 and cfg.intervals.nvml == 1
    path.write_text("[agent]\nflush_intervall = 2\n")
    with pytest.raises(UserError, match="flush_intervall"):
        config.load(path, {})


@pytest.mark.timeout(120)
def test_done_when_agent_beside_reference_server(reference_server, tmp_path):
    db = tmp_path / "a.db"
    proc, url = start_agent("--store", str(db), "--scrape", reference_server + "/metrics",
                            "--interval-scrape", "1")
    body = {"model": "tiny", "prompt": "hello", "max_tokens": 6, "temperature": 0}

    def sampled():  # the engine's rates scraped while it served, and 8 host readings
        req = urllib.request.Request(reference_server + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=60).read()  # serving until then: a rate between scrapes
        with Store.open(db, read_only=True) as store:
            return len(store.samples("cpu_util_pct", source="host")) >= 8 and \
                store.samples("generation_tokens_per_s", source="engine").value.max() > 0 and \
                store.samples("ttft_p50_s", source="engine").value.max() > 0
    wait_for(sampled, "the engine's rates and 8 host readings in the store", 90, every_s=0.5)
    _, text = counters(url)
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=40)[0]
    assert proc.returncode == 0, out
    assert "no NVIDIA driver found: GPU sampling off" in out
    assert "gpuprobe_host_cpu_util_pct" in text and "gpuprobe_engine_num_requests_running" in text
    with Store.open(db) as store:
        assert len(store.samples("cpu_util_pct", source="host")) >= 8
        assert store.samples("ttft_p50_s", source="engine").value.max() > 0
        assert store.samples("generation_tokens_per_s", source="engine").value.max() > 0
    produced, written, _, _ = summary(out)
    assert produced == written == num_rows(db)
