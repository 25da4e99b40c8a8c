"""Flags several commands share, defined once so that they read the same everywhere."""
from __future__ import annotations

from gpuprobe.argtypes import http_url, positive_float


def add_source_flags(p, what: str, since: str = "1h", required: bool = False) -> None:
    """--source prometheus=URL (`what`: what the command reads there) and the range it reads,
    --since and --until (sources.time_range)."""
    p.add_argument("--source", metavar="prometheus=URL", required=required, help=what)
    p.add_argument("--since", default=since,
                   help=f"--source: start, a duration ago, epoch s or ISO time (default {since})")
    p.add_argument("--until", default="now", help="--source: end (default now)")


def add_slo_flags(p) -> None:
    """--slo, a preset or a spec, and --slo-ttft / --slo-tpot overriding its targets
    (decide.slo.slo_from_flags reads the three)."""
    p.add_argument("--slo", default="chat", metavar="PRESET|SPEC",
                   help="chat, code, summarize, batch, or e.g. ttft_p99=2s,tpot_p90=100ms,attain=0.9 "
                        "(default chat: TTFT 2 s, TPOT 0.1 s, 90%%)")
    p.add_argument("--slo-ttft", type=positive_float, default=None, metavar="S",
                   help="TTFT target, s (overrides --slo's)")
    p.add_argument("--slo-tpot", "--slo-tbt", dest="slo_tbt", type=positive_float, default=None,
                   metavar="S", help="TPOT target: each request's mean time per output token, "
                                     "s (overrides --slo's; --slo-tbt: older name)")


def add_server_flags(p, required: bool = False) -> None:
    """--target, the reference server a command changes, and --admin-token-file, the token
    its /admin routes want (else $GPUPROBE_ADMIN_TOKEN)."""
    p.add_argument("--target", required=required, type=http_url, metavar="URL",
                   help="the reference server, e.g. http://127.0.0.1:8000")
    p.add_argument("--admin-token-file", default=None, metavar="FILE",
                   help="file holding the server's admin token (default: $GPUPROBE_ADMIN_TOKEN)")
