"""gpuprobe's reference server: the live switch (`gpuprobe apply`, or the same admin call with
curl), and the `gpuprobe serve` line that starts the layout from scratch."""
from __future__ import annotations

import json

from gpuprobe import __version__
from gpuprobe.decide.plans import split
from gpuprobe.decide.plans.plan import Plan, Process
from gpuprobe.decide.rec_params import Target, layout_request

SOURCES = ("README.md, section 'Serve' (POST /admin/layout, --admin-token-file) and "
           "'Decide' (gpuprobe apply)",)
ACTOR = "gpuprobe-apply"


def admin_body(t: Target, actor: str = ACTOR) -> dict:
    """The POST /admin/layout body apply sends: the layout, who asks and which recommendation."""
    return {**layout_request(t), "actor": actor, "reason": f"recommendation {t.rec_id}"}


def build(t: Target, model: str, total_sms: int, target_url: str) -> Plan:
    apply = Process("switch the running server (waits until the switch is done)",
                    "gpuprobe apply",
                    ("gpuprobe", "apply", "--recommendation", str(t.rec_id), "--target",
                     target_url, "--admin-token-file", "token.txt"), background=False)
    curl = ("curl -s -H \"Authorization: Bearer $(cat token.txt)\" "
            f"{target_url}/admin/layout -d '{json.dumps(admin_body(t))}'")
    serve = ["gpuprobe", "serve", "--model", model, "--layout", t.layout]
    if t.layout != "monolithic":
        serve += ["--prefill-share", f"{t.prefill_share:.4g}"]
    elif t.chunked_prefill and t.max_num_batched_tokens:
        serve += ["--chunked-prefill-tokens", str(t.max_num_batched_tokens)]
    if t.max_num_seqs:
        serve += ["--max-num-seqs", str(t.max_num_seqs)]
    serve += ["--admin-token-file", "token.txt"]
    notes = [f"The same call without gpuprobe: {curl}  (but only `gpuprobe apply` marks the "
             f"recommendation applied in the store, so `recommend --check` can compare).",
             f"To start a server in this layout instead: {' '.join(serve)}  (add --device cuda "
             f"on a GPU)."]
    if t.max_num_seqs:
        notes.append(f"max_num_seqs {t.max_num_seqs} is fixed when a server starts: a live "
                     f"switch keeps the running server's --max-num-seqs.")
    if t.layout == "intra":
        notes.append(split.intra_note(t, total_sms))
    if t.layout == "cross" and (t.prefill_devices, t.decode_devices) != (1, 1):
        notes.append(f"For {t.prefill_devices}P{t.decode_devices}D start {t.prefill_devices} "
                     f"`gpuprobe worker --role prefill` and {t.decode_devices} `gpuprobe worker "
                     f"--role decode` (one per device) and give their link addresses to serve "
                     f"with --prefill-workers, --decode-workers and --link-secret-file (README, "
                     f"'Cross across hosts'); a live switch to cross then runs on all of them. "
                     f"A server without them runs cross as workers it starts itself, 1P1D.")
    return Plan("gpuprobe", t, __version__, SOURCES,
                f"Switch the reference server at {target_url} to {t.layout} live.", (apply,),
                notes=tuple(notes),
                files={"serve.sh": "#!/usr/bin/env bash\n" + " ".join(serve) + "\n",
                       "switch_curl.sh": "#!/usr/bin/env bash\n" + curl + "\n"})
