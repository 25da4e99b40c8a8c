"""The decision half: which layout to run, with which parameters, how sure, and why. What
acts on a decision (engine plans, apply, the post-apply check) is gpuprobe.deploy, above this.

Public API (plain data in and out; the CLI, the fleet, the dashboard, the autopilot and the
report code against it):

    from gpuprobe.decide.slo import parse_slo, SLO_PRESETS
        parse_slo("chat" | "code" | "summarize" | "batch" | "ttft_p99=2s,tpot_p90=100ms,attain=0.9")
        -> gpuprobe.perf.metrics.Slo
    from gpuprobe.decide.decision import run_decision, DecisionOptions, WhatIf
        rec = run_decision(workload_df, profile, slo, DecisionOptions(max_devices=2), store=store)
        the whole decision: what-if scaling, forecast, search, reasons, outlook, stored;
        UserError on bad input; answer.NoLayoutMeets (a UserError carrying the JSON answer:
        feasible false, the closest layout and by how much) when none meets the SLO
    from gpuprobe.decide.recommendation import Recommendation, Deployment, load_recommendation
        rec.deployment (layout, chunked_prefill_tokens, prefill_share, num_prefill, num_decode,
        prefill_tp, decode_tp, tp, replicas, max_num_seqs, link; devices derived),
        rec.candidates (ranked rows), rec.reasons [{text, evidence}], rec.confidence,
        rec.margin, rec.decision (one sentence); load_recommendation(store, id),
        latest_recommendation(store, workload), save_recommendation(store, rec)
    from gpuprobe.decide.answer import answer                # the answer in words, for every reader
    from gpuprobe.decide.recommend import recommend          # the search part alone, not stored
    from gpuprobe.decide.rank import rank                   # the one ranking rule
    from gpuprobe.decide.predict import predict             # the one call into the simulator
"""
