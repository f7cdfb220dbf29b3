"""The references: stock mlx-lm on the same model with its weights round-tripped through 8 or 4 bits.

A small model answers many cases on near-ties, and any harmless change flips some of them. The
8-bit reference is one such change nobody would call a regression; the 4-bit reference is what
most MLX users run (mlx-lm's default quantization, and the bulk of mlx-community's downloads).
Each is every 2-D weight quantized with MLX's affine quantization (groups of 64) and dequantized
back to the model's dtype, then run as stock on the same cases. What the 8-bit one keeps of
stock's right answers is the bar for exact answers; the 4-bit one's open answers (against their
gold, and by the full model's judgment) are the bar for open ones (lazymlx/evals/choice.py).
Their answers are cached like the baseline's: their weights have their own fingerprints, so
their entries sit beside stock's in the same file.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

REFERENCE = "reference"  # the 8-bit reference's mode in eval records
REFERENCE_4BIT = "reference-4bit"
REFERENCE_BITS = {REFERENCE: 8, REFERENCE_4BIT: 4}
GROUP_SIZE = 64


def round_trip(model: nn.Module, bits: int = 8) -> nn.Module:
    """The model with every 2-D weight (embeddings and projections) quantized to `bits` bits and
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
        quantized = mx.quantize(weight.astype(mx.float32), group, bits)
        changed.append((name, mx.dequantize(*quantized, group, bits).astype(weight.dtype)))
    model.update(tree_unflatten(changed))
    mx.eval(model.parameters())
    return model
