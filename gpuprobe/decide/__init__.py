"""The decision half: which layout to run, with which parameters, how sure, and why.

Public API (plain data in and out; the dashboard, autopilot and reports code against it):

    from gpuprobe.decide.slo import parse_slo, SLO_PRESETS
        parse_slo("chat" | "code" | "summarize" | "batch" | "ttft_p99=2s,tpot_p90=100ms,attain=0.9")
        -> gpuprobe.perf.metrics.Slo
    from gpuprobe.decide.recommend import recommend
        rec = recommend(workload_df, profile, slo, devices=1, link=None,
                        cost_per_device_hour=None, evidence_store=None, progress=None) -> dict
        keys: layout, label, params, devices, max_goodput_rps_per_device, candidates (ranked,
        each with max_goodput_rps_per_device, goodput_bracket_rps_per_device, at_goodput
        and, for the top three, at_offered predicted metrics), margin (over the runner-up,
        relative), margin_over_other_layout, confidence {value, word, basis}, reasons
        [{text, evidence}], slo, profile, workload, search, decision (one sentence);
        cost_per_million_output_tokens when priced. UserError on bad input or when no
        candidate meets the SLO at any rate.
    from gpuprobe.decide.store import save_recommendation   # (store, rec) -> id
    from gpuprobe.decide.forecast_workload import workload_from_forecast
        (workload_df, forecast) -> the coming load (upper 80% of requests/s) and mix as a
        workload frame
    from gpuprobe.decide.rank import rank                   # the one ranking rule
    from gpuprobe.decide.predict import predict             # the one call into the simulator
"""
