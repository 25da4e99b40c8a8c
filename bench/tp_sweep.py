"""Prefill and decode step times of a Llama shape split over TP devices, measured, beside a
gpuprobe profile's prediction (a silicon profile: `gpuprobe profile --spec h200 --tp 2`).

One process per device (torch.distributed: NCCL on CUDA, gloo on the CPU for a dry run), each
holding its shard as vLLM splits it: attention heads (KV heads too, while there are at least
as many as devices), the FFN width and the vocabulary; an all-reduce after the attention
output and after the FFN of every layer, as vLLM's row-parallel layers do. Random bf16
weights; attention through torch's SDPA (flash on Hopper), decode attention reading a
[batch, KV heads, context, head dim] cache, one buffer shared by the layers (the bytes each
layer reads are what count). Decode steps run as CUDA graphs where capture works (vLLM's
default), eagerly otherwise; the JSON says which.

    python bench/tp_sweep.py --tp 2 --json tp2.json [--profile h200_tp2.json]
    python bench/tp_sweep.py --device cpu --model tiny --tp 2 --prefill 16,64 --batches 1,4 \
        --context 64          # the plumbing, without a GPU
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--model", default="llama3-8b-shape")
    ap.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    ap.add_argument("--prefill", default="1024,4096,8192", help="prompt lengths (batch 1)")
    ap.add_argument("--batches", default="1,16,64,256", help="decode batch sizes")
    ap.add_argument("--context", type=int, default=2048, help="decode context, tokens")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default=None, help="write the measured steps here")
    ap.add_argument("--profile", default=None,
                    help="a gpuprobe profile whose monolithic worker to compare with")
    args = ap.parse_args()
    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the group's rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_rank, args=(args, port, out), nprocs=args.tp, join=True)
    result = out.get()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    _report(result, args.profile)


def _rank(rank: int, args, port: int, out) -> None:
    import torch
    import torch.distributed as dist

    from gpuprobe.llama.config import resolve_model

    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    else:  # ranks share the cores: one thread each, or their spinning threads contend
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=args.tp)
    cfg = resolve_model(args.model)
    shard = _Shard(cfg, args.tp, torch.device("cuda", rank) if cuda else torch.device("cpu"),
                   torch.bfloat16 if cuda else torch.float32)
    prefill = [{"prompt_tokens": t, "step_s": shard.time(lambda t=t: shard.prefill(t), args.repeat)}
               for t in map(int, args.prefill.split(","))]
    decode, graphs = [], cuda
    for b in map(int, args.batches.split(",")):
        step, graphs = shard.decode_step(b, args.context, graphs)
        decode.append({"batch": b, "context_tokens": args.context,
                       "step_s": shard.time(step, args.repeat)})
        del step
    if rank == 0:
        name = torch.cuda.get_device_name(rank) if cuda else "cpu"
        out.put({"model": args.model, "tp": args.tp, "device": name, "cuda_graphs": graphs,
                 "torch": torch.__version__, "prefill": prefill, "decode": decode})
    dist.barrier()
    dist.destroy_process_group()


class _Shard:
    """One device's part of the model: its weights, and a prefill or decode step over them."""

    def __init__(self, cfg, tp: int, device, dtype) -> None:
        import torch

        self.torch, self.device, self.dtype, self.tp = torch, device, dtype, tp
        hd = cfg.head_dim
        self.heads, self.kv_heads = cfg.n_heads // tp, max(1, cfg.n_kv_heads // tp)
        self.hd, self.dim, self.layers = hd, cfg.dim, cfg.n_layers
        ffn, vocab = cfg.hidden_dim // tp, cfg.vocab_size // tp

        def w(*shape):
            return torch.randn(*shape, device=device, dtype=dtype) * 0.02
        self.embed = w(vocab, cfg.dim)
        self.lm_head = w(cfg.dim, vocab)
        self.w = [(w(cfg.dim, (self.heads + 2 * self.kv_heads) * hd), w(self.heads * hd, cfg.dim),
                   w(cfg.dim, 2 * ffn), w(ffn, cfg.dim)) for _ in range(cfg.n_layers)]

    def _layer(self, x, wqkv, wo, w13, w2, attend):
        F, dist = self.torch.nn.functional, self.torch.distributed
        h = F.rms_norm(x, (self.dim,))
        q, k, v = (h @ wqkv).split([self.heads * self.hd, self.kv_heads * self.hd,
                                    self.kv_heads * self.hd], dim=-1)
        o = attend(q, k, v) @ wo
        dist.all_reduce(o)  # the row-parallel output projection's sum over devices
        x = x + o
        gate, up = (F.rms_norm(x, (self.dim,)) @ w13).chunk(2, dim=-1)
        y = (F.silu(gate) * up) @ w2
        dist.all_reduce(y)
        return x + y

    def prefill(self, tokens: int):
        F = self.torch.nn.functional
        n, hd = tokens, self.hd

        def attend(q, k, v):  # q: [1, H, T, D], k/v: [1, Hkv, T, D]
            q, k, v = (t.view(1, n, -1, hd).transpose(1, 2) for t in (q, k, v))
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return o.transpose(1, 2).reshape(n, -1)
        x = self.embed[: min(n, len(self.embed))].repeat(-(-n // len(self.embed)), 1)[:n]
        for ws in self.w:
            x = self._layer(x, *ws, attend)
        logits = x[-1:] @ self.lm_head  # the last token's, as the engine samples it
        gathered = [self.torch.empty_like(logits) for _ in range(self.tp)]
        self.torch.distributed.all_gather(gathered, logits)
        return gathered

    def decode_step(self, batch: int, context: int, graphs: bool):
        """(a callable running one decode step, whether it is a CUDA graph)."""
        torch, F, hd = self.torch, self.torch.nn.functional, self.hd
        cache = torch.randn(2, batch, self.kv_heads, context, hd, device=self.device,
                            dtype=self.dtype)
        x0 = self.embed[:batch].repeat(-(-batch // len(self.embed)), 1)[:batch].clone()

        def attend(q, k, v):  # q: [B, H, 1, D] against the cached context
            o = F.scaled_dot_product_attention(q.view(batch, -1, 1, hd), cache[0], cache[1],
                                               enable_gqa=True)
            return o.reshape(batch, -1)

        def step():
            x = x0
            for ws in self.w:
                x = self._layer(x, *ws, attend)
            return x @ self.lm_head
        if not graphs:
            return step, False
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    step()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            return graph.replay, True
        except RuntimeError as exc:  # capture of a collective is not everywhere supported
            print(f"CUDA graph capture failed ({exc}); decode steps run eagerly", file=sys.stderr)
            return step, False

    def time(self, fn, repeat: int) -> float:
        """Median seconds of fn() over `repeat` runs after two warm-ups, the devices in step."""
        torch, dist = self.torch, self.torch.distributed
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        times = []
        for i in range(repeat + 2):
            sync()
            dist.barrier()
            t0 = time.perf_counter()
            fn()
            sync()
            if i >= 2:
                times.append(time.perf_counter() - t0)
        return statistics.median(times)


def _report(result: dict, profile_path: str | None) -> None:
    step = None
    if profile_path and os.path.exists(profile_path):
        from gpuprobe.perf.profile import load_profile

        prof = load_profile(profile_path)
        worker = prof.workers["monolithic"]
        step = worker.step_fn()
        print(f"profile {profile_path}: {prof.name}, TP{worker.tp}, "
              f"{worker.prefill.origin} ({(prof.meta.get('silicon') or {}).get('monolithic')})")
    print(f"{result['model']} TP{result['tp']} on {result['device']} "
          f"(decode {'CUDA graphs' if result['cuda_graphs'] else 'eager'})")
    print("| step | measured ms | profile ms | measured / profile |")
    print("|---|---|---|---|")
    rows = [(f"prefill {r['prompt_tokens']}", r["step_s"],
             step(r["prompt_tokens"], r["prompt_tokens"] ** 2, 0, 0) if step else None)
            for r in result["prefill"]]
    rows += [(f"decode {r['batch']} x {r['context_tokens']}", r["step_s"],
              step(0, 0, r["batch"], r["batch"] * r["context_tokens"]) if step else None)
             for r in result["decode"]]
    for name, got, want in rows:
        ratio = f"{got / want:.2f}" if want else "n/a"
        print(f"| {name} | {got * 1e3:.2f} | {want * 1e3 if want else float('nan'):.2f} | {ratio} |")


if __name__ == "__main__":
    main()
