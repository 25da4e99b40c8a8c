"""Engine /metrics scraping: the recorded vLLM fixture, small real HTTP targets that fail in the
ways real ones do, and the reference server (gpuprobe serve)."""
import asyncio
import math
import json
import time
import urllib.request
from pathlib import Path

import pytest
from aiohttp import web
from gpuprobe.collectors import promtext
from gpuprobe.collectors.engine import EngineScraper
from gpuprobe.server.kv_transfer import free_port

FIXTURES = Path(__file__).parent / "fixtures"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
OLD_NAMES = {"vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
             "vllm:inter_token_latency_seconds": "vllm:time_per_output_token_seconds"}


def fixture(name="vllm_metrics.txt", old=False):
    text = (FIXTURES / name).read_text()
    for new, old_name in (OLD_NAMES.items() if old else ()):
        text = text.replace(new, old_name)
    return text


def test_fixture_parses_to_our_names():
    snap = promtext.parse(fixture())
    assert snap.engine == "vllm"
    assert snap.values[("kv_cache_usage_pct", MODEL)] == pytest.approx(41.25)
    assert snap.values[("num_requests_running", MODEL)] == 12
    assert snap.values[("requests_finished_per_s", MODEL)] == 40  # summed over finished_reason


@pytest.mark.parametrize("old", [False, True])
def test_windowed_rates_and_quantiles_old_and_new_names(old):
    a, b = promtext.parse(fixture(old=old)), promtext.parse(fixture("vllm_metrics_later.txt", old=old))
    w = {k[0]: v for k, v in promtext.window(a, b, 5.0).items()}
    assert w["generation_tokens_per_s"] == pytest.approx(1000.0)
    assert w["requests_finished_per_s"] == pytest.approx(4.0)
    # window: 10 TTFTs of 0.09 s (bucket 0.08-0.1) and 10 of 0.3 s (bucket 0.25-0.5)
    assert w["ttft_p50_s"] == pytest.approx(0.1)
    assert w["ttft_p90_s"] == pytest.approx(0.45)
    assert w["ttft_mean_s"] == pytest.approx(0.195)
    assert w["itl_p50_s"] == pytest.approx(0.0375)  # 1000 ITLs of 0.04 s in bucket 0.025-0.05
    assert w["kv_cache_usage_pct"] == pytest.approx(50.0)


def test_counter_reset_gives_no_rate_and_empty_window_no_quantile():
    a, b = promtext.parse(fixture("vllm_metrics_later.txt")), promtext.parse(fixture())
    w = {k[0] for k in promtext.window(a, b, 5.0)}
    assert "generation_tokens_per_s" not in w and "ttft_p50_s" not in w
    same = {k[0] for k in promtext.window(a, a, 5.0)}
    assert "ttft_p50_s" not in same and "generation_tokens_per_s" in same


def test_sglang_and_tgi_names():
    sg = promtext.parse('# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name="m"} 3\n'
                        '# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name="m"} 0.25\n')
    assert sg.engine == "sglang" and sg.values[("num_requests_running", "m")] == 3
    assert sg.values[("kv_cache_usage_pct", "m")] == 25.0
    tgi = promtext.parse("# TYPE tgi_queue_size gauge\ntgi_queue_size 7\n"
                         "# TYPE tgi_request_success counter\ntgi_request_success 12\n")
    assert tgi.engine == "tgi" and tgi.values[("num_requests_waiting", "")] == 7
    assert tgi.values[("requests_finished_per_s", "")] == 12


class Target:
    """A real /metrics HTTP server whose behaviour the test switches: ok, garbage, slow, 500."""

    def __init__(self):
        self.mode, self.texts, self.num_hits = "ok", [fixture(), fixture("vllm_metrics_later.txt")], 0

    async def handle(self, request):
        self.num_hits += 1
        if self.mode == "slow":
            await asyncio.sleep(2.0)
        if self.mode == "garbage":
            return web.Response(text="<html><body>Bad gateway, have a nice day</body></html>\n{")
        if self.mode == "500":
            return web.Response(status=500, text="oops")
        return web.Response(text=self.texts[min(self.num_hits - 1, len(self.texts) - 1)])


async def serve_target(target):
    app = web.Application()
    app.router.add_get("/metrics", target.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"


@pytest.mark.timeout(30)
def test_scraper_rows_then_failures_logged_once_with_backoff():
    async def main():
        target = Target()
        runner, url = await serve_target(target)
        logs = []
        # 1.5 s: room for a busy machine's answer, short of the slow mode's 2 s
        s = EngineScraper(url, host="h1", timeout_s=1.5, log=logs.append)
        try:
            first = await s.collect(1000.0)
            second = await s.collect(1005.0)
            target.mode = "garbage"
            bad = [await s.collect(1010.0 + i) for i in range(5)]
            hits_during_backoff = target.num_hits
            s._retry_at_s = 0
            target.mode = "slow"
            await s.collect(1020.0)
            s._retry_at_s = 0
            target.mode, target.num_hits = "ok", 1
            back = await s.collect(1030.0)
        finally:
            await s.close()
            await runner.cleanup()
        return first, second, bad, hits_during_backoff, back, logs

    first, second, bad, hits, back, logs = asyncio.run(main())
    up = {r.metric: r for r in first}
    assert up["scrape_up"].value == 1 and up["kv_cache_usage_pct"].value == pytest.approx(41.25)
    assert "ttft_p50_s" not in up  # quantiles need a window
    row = {r.metric: r for r in second}["ttft_p50_s"]
    assert row.value == pytest.approx(0.1) and row.source == "engine" and row.device.endswith("/metrics")
    assert row.labels == f"engine=vllm;model={MODEL}"
    assert bad[0][0].metric == "scrape_up" and bad[0][0].value == 0
    assert all(b == [] for b in bad[1:])  # backing off: not retried every tick
    assert hits == 3
    assert [m.split(": ")[1] for m in logs] == ["up", "garbage", "slow", "up"]
    assert {r.metric for r in back} >= {"scrape_up", "num_requests_running"}


def test_scraper_down_target():
    logs = []
    s = EngineScraper(f"http://127.0.0.1:{free_port()}/metrics", timeout_s=0.5, log=logs.append)

    async def twice():
        try:
            return await s.collect(1.0), await s.collect(2.0)
        finally:
            await s.close()
    a, b = asyncio.run(twice())
    assert a[0].value == 0 and b == [] and len(logs) == 1 and ": down:" in logs[0]


def complete(url, max_tokens=8):
    body = {"model": "tiny", "prompt": "hello there", "max_tokens": max_tokens, "temperature": 0}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=60).read())


@pytest.mark.timeout(120)
def test_scraper_against_reference_server(reference_server):
    async def main():
        s = EngineScraper(reference_server + "/metrics", timeout_s=5.0, log=lambda m: None)
        try:
            first = await s.collect(time.time())
            await asyncio.to_thread(complete, reference_server)
            await asyncio.to_thread(complete, reference_server)
            second = await s.collect(time.time() + 1.0)
        finally:
            await s.close()
        return first, second

    first, second = asyncio.run(main())
    rows = {r.metric: r for r in second}
    assert rows["scrape_up"].value == 1
    assert rows["generation_tokens_per_s"].value > 0
    # a percentile under the first bucket's edge is kept as that bound (<name>_p50_below_s):
    # the tiny model's gaps are under 10 ms on a quiet machine and over it on a busy one
    def q(name: str) -> float:
        row = rows.get(f"{name}_s") or rows[f"{name}_below_s"]
        return row.value
    assert q("ttft_p50") > 0 and q("itl_p99") >= q("itl_p50") > 0
    assert (rows.get("ttft_p50_s") or rows["ttft_p50_below_s"]).labels == "engine=gpuprobe;model=tiny"
    assert "kv_cache_usage_pct" in rows and first[0].metric == "scrape_up"


VLLM032 = "smollm2-135m"


def _bump(text: str, changes: dict[str, float]) -> str:
    """The fixture with some sample lines' values replaced: {line prefix: new value}."""
    out = []
    for line in text.splitlines():
        for prefix, value in changes.items():
            if line.startswith(prefix):
                line = f"{line.rsplit(' ', 1)[0]} {value}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_vllm032_names_old_and_new_all_read():
    """What vLLM 0.32 exported serving SmolLM2 (tests/fixtures/vllm032_metrics.txt)."""
    snap = promtext.parse(fixture("vllm032_metrics.txt"))
    names = {k[0] for k in snap.values} | {k[0] for k in snap.buckets}
    assert names >= {"num_requests_waiting_capacity", "num_requests_waiting_deferred",
                     "prefix_cache_queries_per_s", "prefix_cache_hits_per_s",
                     "prompt_tokens_cached_per_s", "admission_rejections_per_s",
                     "iteration_tokens", "prefill_kv_computed_tokens", "queue_time",
                     "requests_stop_per_s", "requests_length_per_s", "requests_abort_per_s",
                     "requests_error_per_s", "requests_finished_per_s"}
    assert snap.values[("prompt_tokens_per_s", VLLM032)] == 49.0


def test_finished_reasons_kept_apart_and_abort_not_finished():
    rs = 'vllm:request_success_total{engine="0",finished_reason="%s",model_name="smollm2-135m"}'
    before = fixture("vllm032_metrics.txt")
    after = _bump(before, {rs % "stop": 11.0, rs % "length": 7.0, rs % "abort": 5.0,
                           rs % "error": 1.0})
    w = {k[0]: v for k, v in promtext.window(promtext.parse(before), promtext.parse(after), 2.0).items()}
    # before: stop 1, length 3; in 2 s: 10 more stop, 4 more length, 5 aborted, 1 error
    assert (w["requests_stop_per_s"], w["requests_length_per_s"]) == (5.0, 2.0)
    assert (w["requests_abort_per_s"], w["requests_error_per_s"]) == (2.5, 0.5)
    assert w["requests_finished_per_s"] == 7.0  # stop + length: aborts and errors never count


def test_percentile_in_a_bucket_wider_than_itself_is_a_bound():
    """vLLM's first queue-time bucket is 0-0.3 s: four waits of 0.03 ms in all. A midpoint
    would read 0.15 s; the window says only 'below 0.3 s', and keeps the exact mean."""
    qt = 'vllm:request_queue_time_seconds_'
    text = fixture("vllm032_metrics.txt")
    empty = _bump(text, {qt + "bucket": 0.0, qt + "sum": 0.0, qt + "count": 0.0})
    w = {k[0]: v for k, v in promtext.window(promtext.parse(empty), promtext.parse(text), 5.0).items()}
    assert w["queue_time_p50_below_s"] == 0.3 and w["queue_time_p99_below_s"] == 0.3
    assert "queue_time_p50_s" not in w
    assert w["queue_time_mean_s"] == pytest.approx(0.00012367399995127926 / 4)
    # A bucket narrower than the value interpolates as before (rank 2.25 of 3: 0.406 s).
    assert promtext.quantile_or_bound(0.75, {0.25: 1.0, 0.5: 3.0, math.inf: 3.0}) == (0.40625, False)
    assert promtext.quantile_or_bound(0.5, {0.3: 4.0, 0.5: 4.0, math.inf: 4.0}) == (0.3, True)
