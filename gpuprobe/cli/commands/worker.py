"""`gpuprobe worker`: a prefill or decode worker as its own process, for a front on any host."""
from __future__ import annotations

from gpuprobe.argtypes import core_list, host_port, port, positive_int

NAME = "worker"
HELP = "run one prefill or decode worker for a cross front (`serve --prefill-workers ...`)"


def add_arguments(p) -> None:
    p.add_argument("--role", required=True, choices=["prefill", "decode"])
    p.add_argument("--listen", required=True, type=host_port, metavar="HOST:PORT",
                   help="the link port: the front's control connection and, on a decode "
                        "worker, prefill workers' KV (0 picks a free port)")
    p.add_argument("--link-secret-file", required=True, metavar="FILE",
                   help="the secret the front and every worker share (at least 16 characters)")
    p.add_argument("--link-tls-cert", metavar="FILE", help="serve the link over TLS with this "
                   "certificate (PEM); needs --link-tls-key")
    p.add_argument("--link-tls-key", metavar="FILE", help="the certificate's private key (PEM)")
    p.add_argument("--link-tls-ca", metavar="FILE", help="prefill: decode workers serve TLS "
                   "with certificates this CA (or self-signed certificate) signs")
    p.add_argument("--model", default="tiny",
                   help="tiny | smollm2-135m | llama3-8b-shape | PATH to a Llama GGUF; the "
                        "front's --model (default tiny)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--cores", type=core_list, default=(), metavar="LIST",
                   help="CPU ids to pin to, e.g. 0,1 (default: all this process may use)")
    p.add_argument("--max-num-seqs", type=positive_int, default=64,
                   help="sequences per batch (default 64)")
    p.add_argument("--kv-cache-mb", type=positive_int, default=256,
                   help="KV cache, MiB; the front's --kv-cache-mb (default 256)")
    p.add_argument("--chunked-prefill-tokens", type=positive_int, default=None, metavar="N",
                   help="prefill: token budget per step with chunked prefill (default: off)")
    p.add_argument("--max-link-connections", type=positive_int, default=64, metavar="N",
                   help="link connections open at once; more are refused (default 64)")
    p.add_argument("--metrics-port", type=port, default=9401,
                   help="port of the worker's /metrics (default 9401; 0 picks a free one)")
    p.add_argument("--metrics-host", default=None,
                   help="address of /metrics (default: --listen's host)")
    p.add_argument("--no-metrics", action="store_true", help="serve no /metrics")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def run(args) -> int:
    import logging

    from gpuprobe.cli.commands.serve import require_device
    from gpuprobe.server.front_model import load_front_model
    from gpuprobe.server.link_auth import load_link_config
    from gpuprobe.server.standalone import run_worker
    from gpuprobe.server.worker import WorkerSpec

    link = load_link_config(args.link_secret_file, args.link_tls_cert, args.link_tls_key,
                            args.link_tls_ca)
    load_front_model(args.model, args.kv_cache_mb, 16, args.device)  # --model checked here
    require_device(args.device)
    host = args.listen.rpartition(":")[0]
    spec = WorkerSpec(worker_id=f"{args.role}@{args.listen}", role=args.role, model=args.model,
                      device=args.device, cores=args.cores, max_num_seqs=args.max_num_seqs,
                      chunked_prefill_tokens=args.chunked_prefill_tokens,
                      kv_cache_mb=args.kv_cache_mb, handoff="tcp", link=link)
    metrics = None if args.no_metrics else (args.metrics_host or host, args.metrics_port)
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_worker(spec, args.listen, link, metrics, args.max_link_connections)
    return 0
