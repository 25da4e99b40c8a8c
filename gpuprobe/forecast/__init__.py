"""Forecasting the prefill/decode mix of a workload (the only package that imports statsmodels,
and only inside functions, so `import gpuprobe.forecast` stays light).

    from gpuprobe.forecast import forecast_workload, store_forecast, forecast_live
    result = forecast_workload(workload_df, bucket_s=10.0, horizon_s=60.0, as_of_s=None,
                               series=("prefill", "decode", "requests"), progress=None)
    result["series"]["prefill_tokens_per_s"]["hi80"]     # upper 80% bound, tokens/s, per bucket
    forecast_id = store_forecast(store, result, workload="azure-conv")

workload_df: arrival_s (s from the first request), prompt_tokens, output_tokens. Series names:
prefill, decode, requests, prompt_length, output_length, share (or their full names
prefill_tokens_per_s, decode_tokens_per_s, requests_per_s, mean_prompt_tokens,
mean_output_tokens, prefill_token_share). Bucket k covers [k * bucket_s, (k + 1) * bucket_s),
as in `analyze`; as_of_s (default: the end of the last bucket with a request) rounds down to a
bucket boundary and only requests before it are used.

The result: {"bucket_s", "as_of_s", "horizon_s", "series": {name: {"model", "t_s", "mean",
"lo80", "hi80", "lo95", "hi95", "interval", "note", "notes", "period", "seconds"}},
"backtest": [{"series", "model", "kind", "mae", "mase", "coverage80", "coverage95",
"own_coverage80", "own_coverage95", "origins", "fit_s", "chosen", "note"}], "notes": [...]}.
t_s is each forecast bucket's start. Each series' model is the candidate with the lowest MAE
in a rolling-origin backtest on its own history (baselines last/ma3/ma6/ma12/seasonal naive
included), or "mean(a, b, c)", the mean of up to three candidates within 10% of that MAE (a
"combination" row in the backtest); intervals are the model's own where they covered 75-85%
(80%) on the backtest, else split-conformal from its backtest errors scaled by the recent
spread; `interval` and `note` say which.
"""
from __future__ import annotations


def forecast_workload(*args, **kwargs) -> dict:
    from gpuprobe.forecast.workload import forecast_workload as run
    return run(*args, **kwargs)


def store_forecast(store, result: dict, workload: str | None = None) -> str:
    from gpuprobe.forecast.persist import store_forecast as run
    return run(store, result, workload)


def forecast_live(store, *args, **kwargs) -> dict:
    from gpuprobe.forecast.live import forecast_live as run
    return run(store, *args, **kwargs)


__all__ = ["forecast_workload", "store_forecast", "forecast_live"]
