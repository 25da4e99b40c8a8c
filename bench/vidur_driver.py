"""One Vidur run for bench/vidur_bench.py; runs under Vidur's own interpreter, not the project's.

    /tmp/vidur-venv/bin/python bench/vidur_driver.py WORKDIR [--native]

WORKDIR holds trace.csv (Vidur's trace-replay columns) and mlp.csv / attention.csv (profiles
in Vidur's format), all written by vidur_bench.py. One replica, vLLM scheduler, Vidur's linear
regression predictor trained on those CSVs (no Hugging Face download), metrics, plots and traces
off. Prints one JSON line: CPU seconds of setup (Simulator(): trace load, predictor training)
and of the event loop (Simulator.run()), the batch count, and TTFT / mean-TBT medians.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time

os.environ["HF_HUB_OFFLINE"] = "1"  # the predictions lookup on the Hub then fails at once

from vidur.config import (
    CacheConfig,
    ClusterConfig,
    LinearRegressionExecutionTimePredictorConfig,
    MetricsConfig,
    ReplicaConfig,
    SimulationConfig,
    TraceRequestGeneratorConfig,
    VllmSchedulerConfig,
)
from vidur.entities import Batch
from vidur.execution_time_predictor.linear_regression_execution_time_predictor import (
    LinearRegressionExecutionTimePredictor,
)
from vidur.execution_time_predictor.random_forrest_execution_time_predictor import (
    RandomForrestExecutionTimePredictor,
)
from vidur.execution_time_predictor.sklearn_execution_time_predictor import (
    SklearnExecutionTimePredictor,
)
from vidur.simulator import Simulator

MAX_TOKENS = 16384
TRACE_DATE = "2023-11-16"


def use_local_profiles(workdir: str) -> None:
    """Point the predictor at WORKDIR's CSVs instead of its Hugging Face datasets. The network
    profiles are never read with one GPU (no tensor or pipeline parallelism)."""
    files = tuple(os.path.join(workdir, f) for f in
                  ("mlp.csv", "attention.csv", "all_reduce.csv", "send_recv.csv"))
    SklearnExecutionTimePredictor._get_input_files = lambda self: files


def fix_linear_predictor() -> None:
    """vidur 0.0.26's linear-regression predictor lacks one abstract method, so it cannot be
    built; borrow the random-forest predictor's (used only with KV parallelism, off here)."""
    cls = LinearRegressionExecutionTimePredictor
    cls._get_kv_parallel_communication_time = (
        RandomForrestExecutionTimePredictor._get_kv_parallel_communication_time)
    cls.__abstractmethods__ = frozenset()


def sim_config(workdir: str, native: bool) -> SimulationConfig:
    cluster = ClusterConfig(
        num_replicas=1,
        replica_config=ReplicaConfig(model_name="meta-llama/Llama-3-8B", num_pipeline_stages=1,
                                     tensor_parallel_size=1, device="h100",
                                     network_device="h100_dgx"),
        cache_config=CacheConfig(block_size=16, num_blocks=40000),
        replica_scheduler_config=VllmSchedulerConfig(batch_size_cap=256,
                                                     max_tokens_in_batch=MAX_TOKENS))
    trace = TraceRequestGeneratorConfig(
        trace_file=os.path.join(workdir, "trace.csv"), date=TRACE_DATE, prefill_scale_factor=1,
        decode_scale_factor=1, time_scale_factor=1, max_tokens=MAX_TOKENS)
    predictor = LinearRegressionExecutionTimePredictorConfig(
        no_cache=True, cache_dir=os.path.join(workdir, "cache"), num_training_job_threads=1,
        prediction_max_tokens_per_request=MAX_TOKENS, prediction_max_batch_size=256,
        prediction_max_prefill_chunk_size=MAX_TOKENS,
        attention_decode_batching_overhead_fraction=0.0,
        use_native_execution_time_predictor=native)
    metrics = MetricsConfig(write_metrics=False, enable_chrome_trace=False, store_plots=False,
                            output_dir=os.path.join(workdir, "out"))
    return SimulationConfig(cluster_config=cluster, request_generator_config=trace,
                            execution_time_predictor_config=predictor, metrics_config=metrics)


def latencies(requests) -> tuple[float, float]:
    """Medians of TTFT and of each request's mean gap between tokens (requests of 2+ tokens)."""
    ttft = [r.prefill_completed_at - r.arrived_at for r in requests]
    tbt = [(r.completed_at - r.prefill_completed_at) / (r.num_decode_tokens - 1)
           for r in requests if r.num_decode_tokens > 1]
    return statistics.median(ttft), statistics.median(tbt)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir")
    ap.add_argument("--native", action="store_true", help="Vidur's C++ execution-time lookup")
    args = ap.parse_args()
    logging.getLogger("vidur").setLevel(logging.WARNING)
    use_local_profiles(args.workdir)
    fix_linear_predictor()
    config = sim_config(args.workdir, args.native)
    t0 = time.process_time()
    sim = Simulator(config)
    t1 = time.process_time()
    requests = [event._request for _, event in sim._event_queue]
    sim.run()
    t2 = time.process_time()
    ttft, tbt = latencies(requests)
    print(json.dumps({"requests": len(requests), "setup_s": t1 - t0, "loop_s": t2 - t1,
                      "batches": Batch._id + 1, "ttft_p50_s": ttft, "tbt_mean_p50_s": tbt}))


if __name__ == "__main__":
    main()
