"""Deployment: what acts on a decision or writes it down for a real engine.

`plans/` (the command lines, flags and files for vLLM, SGLang, Dynamo and the reference
server), `apply.py` (switch a running reference server to a recommendation), `admin_client.py`
(the one `/admin/*` client), `drift.py` (what a server runs against what was applied) and
`check.py` (after Apply: the prediction against what the store measured since). It sits above
gpuprobe.decide and reads its Recommendation; the decision itself never imports it.
"""
