"""Where text segments end, in token ids: for pruning that keeps whole sentences and lines.

A fact is one sentence or one line ("The code of the green door is 48213.", a JSON record, a
table row). Pruning that keeps a fact's value but drops its key leaves the model a number it
can't tell from its look-alikes; scoring every token of a segment by the segment's best token
keeps facts whole, on any model and in any language with sentence punctuation or line breaks.
"""

from __future__ import annotations

import re

import mlx.core as mx
from mlx_lm.tokenizer_utils import TokenizerWrapper

# a token that ends a segment: a line break anywhere in it, or sentence punctuation at its end
# (closing quotes and brackets allowed after). Colons and semicolons don't: `"port": 4821`
# and "is: 4821" keep the key with its value.
SEGMENT_END = re.compile(r"\n|[.!?][\"')\]]*\s*$")


def segment_ends(tokenizer: TokenizerWrapper) -> mx.array:
    """A bool per vocabulary id: whether that token ends a segment (cached on the tokenizer)."""
    cached = getattr(tokenizer, "_lazymlx_segment_ends", None)
    if cached is None:
        raw = tokenizer._tokenizer
        texts = raw.batch_decode([[i] for i in range(len(raw))])
        cached = mx.array([bool(SEGMENT_END.search(text)) for text in texts])
        tokenizer._lazymlx_segment_ends = cached
    return cached


def segment_max(scores: mx.array, ends: mx.array, longest: int) -> mx.array:
    """Each token's score raised to the best in its segment (segments end at `ends`, and are cut
    every `longest` tokens), plus a sliver of its own so a cut through a segment keeps its best
    tokens. ends: a bool per token, in the tokens' order."""
    count = scores.size
    if count == 0:
        return scores
    index = mx.arange(count)
    starts = mx.concatenate([mx.array([True]), ends[:-1]])
    start = mx.cummax(mx.where(starts, index, 0))
    piece = start + (index - start) // longest * longest  # the index the token's piece starts at
    best = mx.full((count,), -mx.inf, dtype=mx.float32).at[piece].maximum(scores.astype(mx.float32))
    return best[piece] + 1e-3 * scores.astype(mx.float32)
