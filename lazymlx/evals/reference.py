"""The noise floor: stock mlx-lm on the same model with its weights round-tripped through 8 bits.

A small model answers many cases on near-ties, and any harmless change flips some of them. The
reference is one such change nobody would call a regression: every 2-D weight quantized with
MLX's affine 8-bit quantization (groups of 64) and dequantized back to fp32, then run as stock
on the same cases. What it keeps of stock's right answers is the floor a pruning preset is
judged against: a loss below it is noise, above it a real loss (lazymlx/evals/calibrate.py). Its
answers are cached like the baseline's: its weights have their own fingerprint, so its entries
sit beside stock's in the same file, one more per case.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

REFERENCE = "reference"  # its mode in eval records
GROUP_SIZE, BITS = 64, 8


def round_trip(model: nn.Module) -> nn.Module:
    """The model with every 2-D weight (embeddings and projections) quantized to 8 bits and
    dequantized back, in place; a weight whose width does not split into groups of 64 uses 32.
    A model kept quantized (a GPU backend) is dequantized first: its packed weights and scales
    are not weights to round-trip."""
    from mlx_lm.utils import dequantize_model

    if any(isinstance(m, nn.QuantizedLinear | nn.QuantizedEmbedding) for m in model.modules()):
        dequantize_model(model)
    changed = []
    for name, weight in tree_flatten(model.parameters()):
        if weight.ndim != 2 or not mx.issubdtype(weight.dtype, mx.floating):
            continue
        group = GROUP_SIZE if weight.shape[-1] % GROUP_SIZE == 0 else 32
        quantized = mx.quantize(weight.astype(mx.float32), group, BITS)
        changed.append((name, mx.dequantize(*quantized, group, BITS).astype(weight.dtype)))
    model.update(tree_unflatten(changed))
    mx.eval(model.parameters())
    return model
