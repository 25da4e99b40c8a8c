"""Data sources: GPU (NVML), host (psutil), engine metrics, the request tap and the agent. Installed as gpuprobe.collectors."""
