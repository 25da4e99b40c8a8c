"""The performance model: cost models (fitted or roofline), profiles and their fitting, memory, specs and metrics. The simulator that runs them is gpuprobe.sim. No torch."""
