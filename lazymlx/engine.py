"""One LazyLLM step over a LazyState: the layer loop, scoring, selection and revival.

Prefill, a decode token and a new chat turn are the same operation. Layer 0 sees every token.
At layer l the present set is every selected token; the ones without KV there (new tokens, and
old ones resuming at their depth from their Aux slot) are computed, and queries are exactly
those. At a pruning layer the last token's head-averaged attention ranks the present set and
only the top fraction goes deeper; computed tokens that drop out save their output to Aux.
Because a (token, layer) pair is computed only when that layer has no KV for the token, no pair
is ever computed twice. Host syncs happen only at pruning layers, where the selection is read.
"""

from __future__ import annotations

import math
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import mlx.core as mx
import numpy as np

from lazymlx.config import LazyConfig
from lazymlx.state import LazyState, StepRecord, contiguous

# mlx-lm's default prefill_step_size, so keep-all matches stock's memory and speed
QUERY_CHUNK = 2048


def prompt_step(state: LazyState, tokens: list[int], config: LazyConfig) -> mx.array:
    """A prompt or a new chat turn: always pruned by the schedule."""
    ranker = Ranker(config.selection, config.seed, state.offset)
    return step(state, tokens, config.pruning_layers(state.num_layers), config.keep_first, ranker)


def decode_step(state: LazyState, token: int, config: LazyConfig) -> mx.array:
    """One generated token, as the config's decode mode says."""
    if config.decode == "full":
        return step(state, [token], {}, config.keep_first, revive=False)
    ranker = Ranker(config.selection, config.seed, state.offset)
    return step(state, [token], config.pruning_layers(state.num_layers), config.keep_first, ranker)


class Ranker:
    """Scores the present tokens at a pruning layer; higher scores go deeper.

    "attention" is LazyLLM's: the last token's head-averaged attention at this very layer.
    "static" scores once, at the step's first pruning layer, and ranks deeper layers by those
    same scores (the paper's one-shot pruning); "random" draws scores from a generator seeded
    by the config's seed and the step's start, so a run repeats exactly.
    """

    def __init__(self, selection: str = "attention", seed: int = 0, start: int = 0) -> None:
        self.selection = selection
        self.rng = np.random.default_rng([seed, start]) if selection == "random" else None
        self.fixed: dict[int, float] | None = None  # static: position → first pruning layer score

    def scores(
        self, queries: mx.array, keys: mx.array, scale: float, present: np.ndarray
    ) -> np.ndarray:
        if self.rng is not None:
            return self.rng.random(len(present), dtype=np.float32)
        if self.fixed is not None:
            return np.array([self.fixed[p] for p in present.tolist()], dtype=np.float32)
        # the host sync of this pruning layer
        scores = np.array(_last_token_attention(queries, keys, scale), dtype=np.float32)
        if self.selection == "static":
            self.fixed = dict(zip(present.tolist(), scores.tolist(), strict=True))
        return scores


def step(
    state: LazyState,
    new_tokens: list[int],
    keep_ratios: dict[int, float],
    keep_first: int = 0,
    ranker: Ranker | None = None,
    revive: bool = True,
) -> mx.array:
    """Run `new_tokens` through the model over `state`; returns the last token's logits (vocab,).

    keep_ratios: layer index → fraction of the present tokens kept after that layer.
    ranker: how pruning layers score tokens (LazyLLM's attention scores when None).
    revive: tokens without KV at a layer may rejoin from their Aux slot. Without it, each layer
        sees only the tokens cached there plus the new ones (decoding over all cached KV).
    """
    start = state.offset
    new = state.append(new_tokens)
    ranker = ranker or Ranker()
    try:
        logits, record, depth, dropped = _layers(
            state, new, keep_ratios, keep_first, ranker, revive
        )
    except BaseException:  # Ctrl-C in a long prefill: leave the state as it was before the step
        state.trim(start)
        raise
    with _interrupts_deferred():  # a half-applied commit would corrupt depths or Aux slots
        state.commit(record, depth, dropped)
    return logits


@contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C until the block is done, then raise it (main thread only, where it arrives)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt


def _layers(
    state: LazyState,
    new: np.ndarray,
    keep_ratios: dict[int, float],
    keep_first: int,
    ranker: Ranker,
    revive: bool,
) -> tuple[mx.array, StepRecord, np.ndarray, list[tuple[np.ndarray, mx.array]]]:
    """The layer loop; the state's bookkeeping is left for the caller to commit."""
    adapter = state.adapter
    depth = state.depth.copy()
    present = np.arange(state.offset)  # positions taking part at the current layer
    carried = new  # positions whose hidden states `h` holds, in order
    h = adapter.embed(mx.array(state.tokens[new[0] :])[None])
    record = StepRecord()
    dropped: list[tuple[np.ndarray, mx.array]] = []  # Aux writes, applied when the step is done
    for layer, block in enumerate(adapter.layers):
        if not revive:
            present = present[(depth[present] > layer) | (present >= new[0])]
        computed = present[depth[present] == layer]
        if len(computed) > len(carried):
            h = _with_resumed(state, h, carried, computed)
        deepest = layer == len(adapter.layers) - 1
        h, queries, keys = _block(state, layer, block, h, computed, present, deepest)
        depth[computed] = layer + 1
        record.computed.append(computed)
        record.present.append(len(present))

        ratio = keep_ratios.get(layer)
        carried = computed
        if ratio and not deepest and math.ceil(ratio * len(present)) < len(present):
            scores = ranker.scores(queries, keys, block.self_attn.scale, present)
            present = _top(scores, present, ratio, keep_first)
            kept = np.isin(computed, present)
            if not kept.all():
                dropped.append((computed[~kept], h[0, mx.array(np.flatnonzero(~kept))]))
                h = h[:, mx.array(np.flatnonzero(kept))]
                carried = computed[kept]
    logits = adapter.logits(h[:, -1:])[0, 0]
    mx.eval(logits, [hidden for _, hidden in dropped], state.buffers())
    return logits, record, depth, dropped


def _block(
    state: LazyState,
    layer: int,
    block,
    x: mx.array,
    computed: np.ndarray,
    present: np.ndarray,
    last_only: bool = False,
) -> tuple[mx.array, mx.array, mx.array]:
    """One decoder block for the computed tokens, attending over the present set.

    Returns the block output and the queries and keys, which scoring needs at pruning layers.
    last_only: in the deepest layer every computed token still needs its KV, but only the last
    token's output is ever read (stock mlx-lm skips the rest too, by never evaluating it).
    """
    attn = block.self_attn
    queries, keys, values = state.adapter.queries_keys_values(attn, block.input_layernorm(x))
    queries, keys = _rope(attn.rope, queries, computed), _rope(attn.rope, keys, computed)
    state.write_kv(layer, computed, keys, values)
    if not np.array_equal(computed, present):
        keys, values = state.read_kv(layer, present)
    if last_only:
        queries, x, computed = queries[:, :, -1:], x[:, -1:], computed[-1:]
    out = _attention(queries, keys, values, attn.scale, computed, present)
    out = out.transpose(0, 2, 1, 3).reshape(1, len(computed), -1)
    h = x + attn.o_proj(out)
    return h + block.mlp(block.post_attention_layernorm(h)), queries, keys


def _attention(
    queries: mx.array,
    keys: mx.array,
    values: mx.array,
    scale: float,
    computed: np.ndarray,
    present: np.ndarray,
) -> mx.array:
    """Fused attention, QUERY_CHUNK queries at a time, each over the keys up to its last position.

    Chunking bounds the score matrix MLX's CPU attention materializes (heads × chunk × keys) and
    skips keys later than a whole chunk, as mlx-lm's chunked prefill does.
    """
    outputs = []
    for start in range(0, len(computed), QUERY_CHUNK):
        chunk = computed[start : start + QUERY_CHUNK]
        visible = int(np.searchsorted(present, chunk[-1], side="right"))
        outputs.append(
            mx.fast.scaled_dot_product_attention(
                queries[:, :, start : start + QUERY_CHUNK],
                keys[:, :, :visible],
                values[:, :, :visible],
                scale=scale,
                mask=_causal_mask(chunk, present[:visible]),
            )
        )
    return outputs[0] if len(outputs) == 1 else mx.concatenate(outputs, axis=2)


def _rope(rope, x: mx.array, positions: np.ndarray) -> mx.array:
    """Rotate each token at its original position (the model's own rope module, so scaling holds).

    mx.fast.rope takes one offset per batch row, so scattered positions go on the batch axis.
    """
    if contiguous(positions):
        return rope(x, offset=int(positions[0]))
    rotated = rope(x.transpose(2, 1, 0, 3), offset=mx.array(positions.astype(np.int32)))
    return rotated.transpose(2, 1, 0, 3)


def _causal_mask(queries: np.ndarray, keys: np.ndarray) -> str | mx.array | None:
    """Causal on original positions: a query sees keys at its own position or earlier."""
    if len(queries) == 1 and queries[0] == keys[-1]:
        return None
    if np.array_equal(keys[len(keys) - len(queries) :], queries):
        return "causal"  # queries are the newest keys: MLX aligns the causal mask bottom-right
    return mx.array(keys[None, :] <= queries[:, None])


def _with_resumed(
    state: LazyState, h: mx.array, carried: np.ndarray, computed: np.ndarray
) -> mx.array:
    """Merge this step's hidden states with those of tokens resuming from their Aux slot."""
    resumed = np.setdiff1d(computed, carried, assume_unique=True)
    merged = mx.concatenate([h, state.read_aux(resumed)[None]], axis=1)
    order = np.argsort(np.concatenate([carried, resumed]), kind="stable")
    return merged[:, mx.array(order.astype(np.int32))]


def _last_token_attention(queries: mx.array, keys: mx.array, scale: float) -> mx.array:
    """Attention probabilities of the last query over the present keys, averaged over heads.

    One row per head (a 1×n product), since the fused attention never returns its weights.
    """
    _, heads, _, head_dim = queries.shape
    kv_heads = keys.shape[1]
    last = queries[0, :, -1, :].reshape(kv_heads, heads // kv_heads, head_dim)
    # fp32 even for half-precision models: bf16 logits would reorder near-equal scores
    last = last.astype(mx.float32) * scale
    logits = last @ keys[0].astype(mx.float32).swapaxes(-1, -2)
    return mx.softmax(logits, axis=-1, precise=True).mean(axis=(0, 1))


def _top(scores: np.ndarray, present: np.ndarray, ratio: float, keep_first: int) -> np.ndarray:
    """The ceil(ratio·n) best-scored present positions, always with the last and the first few."""
    scores[present < keep_first] = np.inf
    scores[-1] = np.inf  # the last token predicts the next one
    k = max(math.ceil(ratio * len(present)), int(np.isinf(scores).sum()))
    best = np.argpartition(-scores, k - 1)[:k]
    return present[np.sort(best)]
