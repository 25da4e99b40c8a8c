"""`gpuprobe serve`: the reference server (OpenAI API) in a monolithic, intra or cross layout."""
from __future__ import annotations

from gpuprobe.argtypes import fraction, host_port_list, nonneg_int, port, positive_int

NAME = "serve"
HELP = "run the reference LLM server (OpenAI-compatible API) in a chosen layout"


def add_arguments(p) -> None:
    p.add_argument("--model", default="tiny",
                   help="tiny | smollm2-135m | llama3-8b-shape | PATH to a Llama GGUF (default tiny)")
    p.add_argument("--layout", default="monolithic", choices=["monolithic", "intra", "cross"])
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=port, default=8000, help="port (0 = any free port; default 8000)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--prefill-share", type=fraction, default=0.5,
                   help="intra/cross: share of cores (CPU) or SMs (CUDA) for prefill (default 0.5)")
    p.add_argument("--chunked-prefill-tokens", type=positive_int, default=None, metavar="N",
                   help="token budget per step with chunked prefill (default: off)")
    p.add_argument("--admin-token-file", default=None, metavar="FILE",
                   help="file holding the bearer token for /admin (else $GPUPROBE_ADMIN_TOKEN; "
                        "with neither, /admin answers 403)")
    p.add_argument("--max-num-seqs", type=positive_int, default=64, help="sequences per batch (default 64)")
    p.add_argument("--max-queue", type=nonneg_int, default=256,
                   help="requests queued beyond --max-num-seqs before 429 (default 256)")
    p.add_argument("--max-queue-wait", default="10s", metavar="DURATION",
                   help="answer 429 when a new request's predicted wait for its first token is "
                        "longer (0: no limit; default 10s)")
    p.add_argument("--kv-cache-mb", type=positive_int, default=256,
                   help="KV cache per worker, MiB (default 256)")
    p.add_argument("--cross-decode-addr", default=None, metavar="HOST:PORT",
                   help="local cross: where the decode worker the front starts listens for KV "
                        "(default 127.0.0.1 and a free port)")
    p.add_argument("--prefill-workers", type=host_port_list, default=(), metavar="A,B",
                   help="`gpuprobe worker --role prefill` link addresses the cross layout "
                        "routes to (with --decode-workers and --link-secret-file)")
    p.add_argument("--decode-workers", type=host_port_list, default=(), metavar="C,D",
                   help="`gpuprobe worker --role decode` link addresses")
    p.add_argument("--link-secret-file", default=None, metavar="FILE",
                   help="the secret the remote workers share (at least 16 characters)")
    p.add_argument("--link-tls-ca", default=None, metavar="FILE",
                   help="the workers serve their link over TLS with certificates this CA (or "
                        "self-signed certificate) signs")
    p.add_argument("--grace", default="10s", help="on SIGTERM, how long in-flight requests get")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def options_from_args(args):
    """(ServeOptions, LayoutConfig) from parsed flags; UserError names the bad flag."""
    from gpuprobe.errors import UserError
    from gpuprobe.server.kv_ring import ring_mb
    from gpuprobe.server.kv_transfer import parse_addr
    from gpuprobe.server.options import LayoutConfig, ServeOptions

    if args.cross_decode_addr:
        try:
            parse_addr(args.cross_decode_addr)
        except ValueError as exc:
            raise UserError(f"--cross-decode-addr: {exc}") from None
    ring_mb()  # a malformed GPUPROBE_KV_RING_MB stops here, not in a layout switch later
    from gpuprobe.units import parse_duration

    link = _remote_link(args)
    remote = args.layout == "cross" and bool(args.prefill_workers)
    layout = LayoutConfig(args.layout, args.prefill_share, args.chunked_prefill_tokens,
                          num_prefill=len(args.prefill_workers) if remote else 1,
                          num_decode=len(args.decode_workers) if remote else 1, remote=remote)
    opts = ServeOptions(model=args.model, device=args.device, max_num_seqs=args.max_num_seqs,
                        max_queue=args.max_queue, kv_cache_mb=args.kv_cache_mb,
                        max_queue_wait_s=parse_duration(args.max_queue_wait, "--max-queue-wait"),
                        cross_decode_addr=args.cross_decode_addr,
                        prefill_workers=args.prefill_workers,
                        decode_workers=args.decode_workers, link=link)
    return opts, layout


def _remote_link(args):
    """The LinkConfig for --prefill-workers/--decode-workers, or None without them."""
    from gpuprobe.errors import UserError
    from gpuprobe.server.link_auth import load_link_config

    if bool(args.prefill_workers) != bool(args.decode_workers):
        raise UserError("--prefill-workers and --decode-workers go together (at least one "
                        "worker of each role)")
    if not args.prefill_workers:
        if args.link_secret_file or args.link_tls_ca:
            raise UserError("--link-secret-file and --link-tls-ca are for remote workers: "
                            "give --prefill-workers and --decode-workers")
        return None
    return load_link_config(args.link_secret_file, ca=args.link_tls_ca)


def require_device(device: str) -> None:
    """GpuprobeError, before any server starts, when --device cuda has no CUDA device."""
    from gpuprobe.errors import GpuprobeError

    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise GpuprobeError("--device cuda: no CUDA device visible to torch")


def run(args) -> int:
    import asyncio
    import logging

    from gpuprobe.errors import GpuprobeError
    from gpuprobe.server.admin import load_token
    from gpuprobe.server.main import serve
    from gpuprobe.units import parse_duration

    opts, layout = options_from_args(args)
    require_device(opts.device)
    token, source = load_token(args.admin_token_file)
    grace_s = parse_duration(args.grace, "--grace")
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(opts, layout, args.host, args.port, args.store, token, source, grace_s))
    except OSError as exc:
        raise GpuprobeError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
    except RuntimeError as exc:
        raise GpuprobeError(str(exc).splitlines()[0]) from None
    return 0
