"""Checking the model against the reference server on this machine (`gpuprobe validate`).

The model itself (cost curves, fits, simulator, the one prediction path) is gpuprobe.perf;
this package measures a live, noisy server to check it: run.py the whole run, plan.py its
budget (sizing.py fills it in, budget_watch.py enforces it), replay_rate.py the load,
layout_probe.py one layout's server, cpu_watch.py and speed_probe.py the host's noise,
predictions.py what the model predicts for the run, verdict.py the comparison, result.py the
JSON result (docs/validate.md).
"""
