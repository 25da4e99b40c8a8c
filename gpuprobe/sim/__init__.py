"""The simulator: a workload through a layout on the engine's own scheduler, stepped by the
cost model on a virtual clock (simulator.py, layouts.py, engine.py and its parts), and the one
prediction path on top of it (predict.py). It reads gpuprobe.perf's Profile and metrics; the
fitting that makes a Profile stays in perf. No torch."""
