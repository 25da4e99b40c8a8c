"""`gpuprobe apply`: switch a running reference server to a stored recommendation's layout."""
from __future__ import annotations

import json

from gpuprobe.argtypes import positive_int
from gpuprobe.cli.flags import add_server_flags

NAME = "apply"
HELP = ("switch a running reference server to a stored recommendation (POST /admin/layout), "
        "wait until it is done, and mark the recommendation applied")


def add_arguments(p) -> None:
    p.add_argument("--recommendation", required=True, type=positive_int, metavar="ID",
                   help="recommendation id (printed by gpuprobe recommend)")
    add_server_flags(p, required=True)
    p.add_argument("--force", action="store_true",
                   help="switch even while another controller (an autopilot) holds the server's "
                        "lease: that lease ends, the autopilot stops, the server records the takeover")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args) -> int:
    from gpuprobe.deploy.apply import apply_recommendation
    from gpuprobe.errors import UserError
    from gpuprobe.server.admin import ENV_VAR, load_token
    from gpuprobe.store import Store

    token, _ = load_token(args.admin_token_file)
    if token is None:
        raise UserError(f"no admin token: give --admin-token-file FILE or set ${ENV_VAR}")
    with Store.open(args.store, create=False) as store:
        out = apply_recommendation(store, args.recommendation, args.target, token,
                                   force=args.force)
    if args.json:
        print(json.dumps(out, default=float))
        return 0
    share = f" prefill_share={out['prefill_share']:g}" if out["prefill_share"] is not None else ""
    chunk = (f" chunked_prefill_tokens={out['chunked_prefill_tokens']}"
             if out["chunked_prefill_tokens"] else "")
    if out.get("unchanged"):
        print(f"{out['target']} already runs {out['layout']}{share}{chunk}: not switched (a switch "
              f"restarts the workers); recommendation {out['recommendation']} marked applied")
    else:
        print(f"{out['target']} now runs {out['layout']}{share}{chunk} (switched in "
              f"{out['switch'].get('duration_s', 0):.2f} s; layout event by {out['actor']}: "
              f"{out['reason']}); recommendation {out['recommendation']} marked applied")
    if out.get("took_over"):
        print(f"took the server over from {out['took_over']}, whose lease ended (--force)")
    for item in out["kept"]:
        print(f"not changed by a live switch: {item}")
    return 0
