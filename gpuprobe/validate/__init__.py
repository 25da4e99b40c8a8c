"""Checking the model against the reference server on this machine (`gpuprobe validate`).

The model itself (cost curves, fits, simulator, the one prediction path) is gpuprobe.perf;
this package measures a live, noisy server to check it: run.py the whole run, plan.py its
budget, replay_rate.py the load, layout_probe.py one layout's server, cpu_watch.py and
speed_probe.py the host's noise, verdict.py the comparison (docs/validate.md).
"""
