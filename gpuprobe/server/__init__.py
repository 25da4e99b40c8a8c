"""The reference server: an OpenAI-compatible front (aiohttp, no torch) routing requests to
worker processes (torch) in a monolithic, intra-split or cross-split layout.

Start one from Python with gpuprobe.server.launch.start_server; from the shell with
`gpuprobe serve`.
"""
