"""One decoder block run for chosen tokens over a compact cache, and the pruning score.

The prompt step and the reviving decode both need what the model's own forward pass can't give:
rows at scattered original positions, and the last token's attention weights (MLX's fused
attention never returns them). Everything else goes through the model's own modules.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from lazymlx.cache import LazyKVCache
from lazymlx.models.adapters import LlamaAdapter


def rope_at(rope: nn.Module, x: mx.array, positions: mx.array, first: int | None) -> mx.array:
    """Rotate each token at its original position with the model's own rope (scaling kept).

    first: the first position when `positions` is one run (a single offset); else None, and the
    tokens go on the batch axis, since mx.fast.rope takes one offset per batch row.
    """
    if first is not None:
        return rope(x, offset=first)
    return rope(x.transpose(2, 1, 0, 3), offset=positions).transpose(2, 1, 0, 3)


def block_forward(
    adapter: LlamaAdapter,
    block: nn.Module,
    cache: LazyKVCache,
    x: mx.array,
    positions: mx.array,
    first: int | None,
    mask: str | mx.array | None,
    last_only: bool = False,
) -> tuple[mx.array, mx.array]:
    """Append the tokens' KV to the layer's cache, attend over every row, run the MLP.

    Returns the block output and the last token's queries (for scoring). last_only: only the last
    token's output is ever read (the deepest layer), but every token still needs its KV.
    """
    attn = block.self_attn
    queries = append_kv(adapter, block, cache, x, positions, first)
    last_query = queries[:, :, -1:]
    if last_only:
        queries, x, mask = last_query, x[:, -1:], None
    keys, values = cache.fetch()
    out = mx.fast.scaled_dot_product_attention(queries, keys, values, scale=attn.scale, mask=mask)
    h = x + attn.o_proj(out.transpose(0, 2, 1, 3).reshape(*x.shape[:2], -1))
    return h + block.mlp(block.post_attention_layernorm(h)), last_query


def append_kv(
    adapter: LlamaAdapter,
    block: nn.Module,
    cache: LazyKVCache,
    x: mx.array,
    positions: mx.array,
    first: int | None,
) -> mx.array:
    """Project the tokens, append their rotated keys and values to the cache; their queries."""
    attn = block.self_attn
    queries, keys, values = adapter.queries_keys_values(attn, block.input_layernorm(x))
    cache.append(rope_at(attn.rope, keys, positions, first), values, positions)
    return rope_at(attn.rope, queries, positions, first)


def last_token_attention(query: mx.array, keys: mx.array, scale: float) -> mx.array:
    """Attention probabilities of the last token over every row, averaged over heads (LazyLLM's
    importance score). One explicit row per head: a 1×rows product, in fp32 even for half
    models, since bf16 logits would reorder near-equal scores."""
    _, heads, _, head_dim = query.shape
    kv_heads = keys.shape[1]
    last = query[0, :, -1, :].reshape(kv_heads, heads // kv_heads, head_dim)
    logits = (last.astype(mx.float32) * scale) @ keys[0].astype(mx.float32).swapaxes(-1, -2)
    return mx.softmax(logits, axis=-1, precise=True).mean(axis=(0, 1))
