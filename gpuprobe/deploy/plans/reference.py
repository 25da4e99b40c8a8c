"""gpuprobe's reference server: the live switch (`gpuprobe apply`, or the same admin call with
curl), and the `gpuprobe serve` line that starts the layout from scratch."""
from __future__ import annotations

import json

from gpuprobe import __version__
from gpuprobe.deploy.admin_client import layout_body
from gpuprobe.deploy.apply import ACTOR, kept_by_live_switch
from gpuprobe.deploy.plans import split
from gpuprobe.deploy.plans.plan import Plan, Process
from gpuprobe.decide.recommendation import Recommendation

SOURCES = ("README.md, section 'Serve' (POST /admin/layout, --admin-token-file) and "
           "'Decide' (gpuprobe apply)",)

def build(rec: Recommendation, model: str, total_sms: int, target_url: str) -> Plan:
    d = rec.deployment
    apply = Process("switch the running server (waits until the switch is done)",
                    "gpuprobe apply",
                    ("gpuprobe", "apply", "--recommendation", str(rec.id), "--target",
                     target_url, "--admin-token-file", "token.txt"), background=False)
    body = {**layout_body(d), "actor": ACTOR, "reason": f"recommendation {rec.id}"}
    curl = ("curl -s -H \"Authorization: Bearer $(cat token.txt)\" "
            f"{target_url}/admin/layout -d '{json.dumps(body)}'")
    serve = ["gpuprobe", "serve", "--model", model, "--layout", d.layout]
    if d.layout != "monolithic":
        serve += ["--prefill-share", f"{d.prefill_fraction:.4g}"]
    elif d.chunked_prefill_tokens:
        serve += ["--chunked-prefill-tokens", str(d.chunked_prefill_tokens)]
    if d.max_num_seqs:
        serve += ["--max-num-seqs", str(d.max_num_seqs)]
    serve += ["--admin-token-file", "token.txt"]
    notes = [f"The same call without gpuprobe: {curl}  (but only `gpuprobe apply` marks the "
             f"recommendation applied in the store, so `recommend --check` can compare).",
             f"To start a server in this layout instead: {' '.join(serve)}  (add --device cuda "
             f"on a GPU)."]
    if d.layout == "intra":
        notes.append(split.intra_note(d, total_sms))
    if d.layout == "cross" and (d.num_prefill, d.num_decode) != (1, 1):
        notes.append(f"For {d.num_prefill}P{d.num_decode}D start {d.num_prefill} `gpuprobe "
                     f"worker --role prefill` and {d.num_decode} `gpuprobe worker --role "
                     f"decode` (one per device) and give their link addresses to serve with "
                     f"--prefill-workers, --decode-workers and --link-secret-file (README, "
                     f"'Cross across hosts'); the live switch then runs on them. A server "
                     f"without them starts the {d.num_prefill + d.num_decode} workers itself, "
                     f"on its own cores.")
    if max(d.tp, d.prefill_tp, d.decode_tp, d.replicas) > 1:
        notes.append(f"The reference server runs one copy of the layout with one device per "
                     f"worker, no tensor parallelism: {d.label} x{d.replicas} ({d.devices} devices, tensor parallel) "
                     f"is for vLLM, SGLang or Dynamo (`gpuprobe plan --engine vllm`).")
    notes += [f"Not changed by a live switch: {k}." for k in kept_by_live_switch(d)]
    return Plan("gpuprobe", rec, __version__, SOURCES,
                f"Switch the reference server at {target_url} to {d.layout} live.", (apply,),
                notes=tuple(notes),
                files={"serve.sh": "#!/usr/bin/env bash\n" + " ".join(serve) + "\n",
                       "switch_curl.sh": "#!/usr/bin/env bash\n" + curl + "\n"})
