"""One decoder block run for chosen tokens over a compact cache, and the pruning score.

The prompt step and the reviving decode both need what the model's own forward pass can't give:
rows at scattered original positions, and the last token's attention weights (MLX's fused
attention never returns them). Everything else goes through the model's own modules.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from lazymlx.engine import hooks
from lazymlx.engine.cache import LazyKVCache, causal_mask
from lazymlx.models.adapters import LlamaAdapter
from lazymlx.platform import on_cuda


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
    observe: int = 1,
) -> tuple[mx.array, mx.array]:
    """Append the tokens' KV to the layer's cache, attend over every row, run the MLP.

    Returns the block output and the last `observe` tokens' queries (for scoring). last_only: only
    the last token's output is ever read (the deepest layer), but every token still needs its KV.
    """
    attn = block.self_attn
    queries = append_kv(adapter, block, cache, x, positions, first)
    observed = queries[:, :, -observe:]
    if last_only:
        queries, x = queries[:, :, -1:], x[:, -1:]
        mask = mask[-1:] if isinstance(mask, mx.array) else None
    keys, values = cache.fetch()
    out = attend(queries, keys, values, attn.scale, mask)
    attended = attn.o_proj(out.transpose(0, 2, 1, 3).reshape(*x.shape[:2], -1))
    return adapter.finish_block(block, x, attended), observed


def attend(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: str | mx.array | None
) -> mx.array:
    """MLX's fused attention, except for an explicit mask on MLX's CUDA backend.

    There the fused kernel is cuDNN's, which builds a plan for each new shape of queries, keys
    and mask (20-30 ms on the host) and keeps 256 of them. The engine's masked calls (a
    completion unit, revived tokens, a reviving decode step) have a new shape nearly every
    time, so they would pay a build each, and MLX ends the process once such misses pass twice
    the cache's size. Written out, the same attention costs no build.
    """
    if isinstance(mask, mx.array) and on_cuda():
        return _unfused_attention(queries, keys, values, scale, mask)
    return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale, mask=mask)


def _unfused_attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask: mx.array
) -> mx.array:
    """Attention of queries (1, heads, n, dim) over grouped keys and values (1, kv heads, m,
    dim) under a boolean (n, m) mask; its products in the model's dtype, softmax in fp32. The
    query heads that share a kv head are stacked as rows of one product, so keys and values are
    read as they are, never broadcast over the group."""
    _, num_heads, count, head_dim = queries.shape
    kv_heads = keys.shape[1]
    groups = num_heads // kv_heads
    rows = queries.reshape(1, kv_heads, groups * count, head_dim)
    logits = ((rows * scale) @ keys.swapaxes(-1, -2)).reshape(1, kv_heads, groups, count, -1)
    logits = mx.where(mask, logits, mx.array(-mx.inf, logits.dtype))
    probs = mx.softmax(logits, axis=-1, precise=True).reshape(1, kv_heads, groups * count, -1)
    return (probs @ values).reshape(1, num_heads, count, -1)


def attention_mask(
    cache: LazyKVCache, at: mx.array, window: int | None, ordered: bool = True
) -> str | mx.array | None:
    """The mask for tokens at positions `at` about to join the cache's rows: causal on original
    positions, and within `window` positions on a sliding-window layer. ordered: the tokens
    come after every cached row (a new step's own tokens), where MLX's "causal" is exact."""
    if ordered and window is None:
        return "causal" if at.size > 1 else None
    return causal_mask(mx.concatenate([cache.row_positions(), at]), at, window)


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


def attention_probs(
    queries: mx.array, keys: mx.array, scale: float, mask: mx.array | None = None
) -> mx.array:
    """The attention the last w tokens pay the cache's rows, the pruning's evidence: (kv heads,
    query heads per kv head, w, rows) probabilities of this process's heads.

    queries (1, heads, w, dim) are the last w tokens' (w = 1: LazyLLM's last-token rule); mask
    (w, rows) says which rows each may see. Explicit products, since MLX's fused attention never
    returns weights, in fp32 even for half models, since bf16 logits would reorder near-equal
    scores.
    """
    _, num_heads, window, head_dim = queries.shape
    kv_heads = keys.shape[1]
    grouped = queries[0].reshape(kv_heads, num_heads // kv_heads, window, head_dim)
    keys_t = keys[0].astype(mx.float32).swapaxes(-1, -2)[:, None]
    logits = (grouped.astype(mx.float32) * scale) @ keys_t
    if mask is not None:
        logits = mx.where(mask, logits, -mx.inf)
    return mx.softmax(logits, axis=-1, precise=True)


def attention_scores(probs: mx.array) -> mx.array:
    """Each row's pruning score: the probabilities averaged over the w queries and over the
    heads (the paper's reduction).

    Under tensor parallelism (lazymlx/engine/hooks.py) a rank holds only its share of the heads,
    and ranking its own would keep other tokens than the other ranks and split their caches: the
    mean runs over the whole group's heads, and an all_sum result is the same on every rank, so
    every rank ranks bit-identical scores and keeps the same tokens.
    """
    probs = probs.mean(axis=2)
    group = hooks.heads_group()
    if group is None:
        return probs.mean(axis=(0, 1))
    heads = probs.shape[0] * probs.shape[1]
    return mx.distributed.all_sum(probs.sum(axis=(0, 1)), group=group) / (heads * group.size())


def attention_peak(probs: mx.array) -> mx.array:
    """(w, rows): the most attention any one head pays each row from each of the w queries,
    over the whole group's heads under tensor parallelism: where a question points."""
    peak = probs.max(axis=(0, 1))
    group = hooks.heads_group()
    return peak if group is None else mx.distributed.all_max(peak, group=group)
