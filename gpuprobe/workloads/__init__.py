"""Workloads: trace importers, synthetic workloads, the replay load generator and mix analysis.

Kept import-light: submodules pull in pandas/numpy/aiohttp only when used.
"""
