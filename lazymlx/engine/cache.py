"""The lazy context: per-layer compact KV caches in mlx-lm's cache protocol, plus depths and Aux.

A layer's cache holds only the tokens that have keys and values at that layer, appended in the
order they were computed, with their original positions beside them on the device. `offset` is
the next *position* (what the model's rope needs), not the row count. Because every token a step
adds comes after every token already cached, MLX's bottom-right "causal" mask and mlx-lm's own
forward pass stay correct on these caches: mlx-lm's `generate_step` decodes over them unchanged,
and pruning saves KV memory instead of leaving holes in position-addressed buffers.

A token's *depth* is how many layers hold its KV; those layers are always 0..depth-1 (KV is never
deleted and every step enters at layer 0), so a pruned token needs one saved hidden state to
resume: the output of layer depth-1, its Aux slot. Depths and Aux slots live on the device, slot
index = position, so revival during decode needs no host sync. Pair counts are derived from
depths: each (token, layer) pair below a token's depth was computed exactly once.
"""

from __future__ import annotations

import os
from collections.abc import Container
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from lazymlx.engine import hooks
from lazymlx.engine.config import LazyConfig
from lazymlx.engine.mlx_lm_private import register_cache_classes
from lazymlx.errors import LazymlxError
from lazymlx.models.adapters import LlamaAdapter, adapter_for

GROWTH = 256  # buffers grow in steps, like mlx-lm's KVCache, so appending one token never copies
# A sliding-window layer keeps this many positions beyond its window, so a context can still be
# trimmed back by that much (a reused conversation drops its last decode token), and drops rows
# only this many at a time, so a decode step rarely copies its cache.
FORGET_SLACK = 256


def _grown(buffer: mx.array | None, used: int, needed: int, shape: tuple, dtype, axis: int):
    """`buffer` with room for `needed` rows along `axis`, its first `used` rows kept."""
    capacity = 0 if buffer is None else buffer.shape[axis]
    if needed <= capacity:
        return buffer
    rows = GROWTH * ((needed + GROWTH - 1) // GROWTH)
    fresh = mx.zeros((*shape[:axis], rows - used, *shape[axis + 1 :]), dtype)
    if buffer is None or used == 0:
        return fresh
    kept = buffer[(slice(None),) * axis + (slice(0, used),)]
    return mx.concatenate([kept, fresh], axis=axis)


def causal_mask(keys_at: mx.array, queries_at: mx.array, window: int | None = None) -> mx.array:
    """Which keys each query may see, by original positions: the one causal mask of the engine
    (rows of a pruned or completed layer are not in position order). window: a sliding-window
    layer's reach."""
    mask = keys_at[None] <= queries_at[:, None]
    if window is not None:
        mask = mask & (queries_at[:, None] - keys_at[None] < window)
    return mask


class CacheEntry:
    """What mlx-lm's functions call on an entry of a cache list that the classes below do not
    define themselves: `from_state` (load_prompt_cache, a context's copy, a group's loader) and
    `size`. mlx-lm's own base class for this, _BaseCache, is private (mlx_lm_private.py)."""

    @classmethod
    def from_state(cls, state: tuple) -> CacheEntry:
        """The entry holding `state`, made without __init__, as mlx-lm makes its caches."""
        entry = cls.__new__(cls)
        entry.state = state
        return entry

    def size(self) -> int:
        return 0


class LazyKVCache(CacheEntry):
    """One layer's keys and values for the tokens computed there, with their positions.

    On a sliding-window layer (Gemma 3's local layers) a query sees only the last `window`
    positions, so rows older than every query still to come are dropped (`forget_before`), as
    mlx-lm's RotatingKVCache bounds stock's memory; `forgotten` records how far.
    """

    def __init__(self, window: int | None = None) -> None:
        self.keys: mx.array | None = None
        self.values: mx.array | None = None
        self.positions: mx.array | None = None  # int32 rows → original position
        self.rows = 0
        self.offset = 0  # the next position: tokens in the context, pruned ones included
        self.window = window
        self.forgotten = 0  # rows at positions below this may have been dropped
        self.next_check = 0  # LazyState.forget_out_of_window looks again from this position

    def append(self, keys: mx.array, values: mx.array, positions: mx.array) -> None:
        """Add rows for tokens at `positions` (already rotated keys), after every cached row."""
        count = keys.shape[2]
        end = self.rows + count
        self.keys = _grown(self.keys, self.rows, end, keys.shape, keys.dtype, 2)
        self.values = _grown(self.values, self.rows, end, values.shape, values.dtype, 2)
        self.positions = _grown(self.positions, self.rows, end, (count,), mx.int32, 0)
        self.keys[..., self.rows : end, :] = keys
        self.values[..., self.rows : end, :] = values
        self.positions[self.rows : end] = positions
        self.rows = end

    def fetch(self) -> tuple[mx.array, mx.array]:
        return self.keys[..., : self.rows, :], self.values[..., : self.rows, :]

    def row_positions(self) -> mx.array:
        return self.positions[: self.rows] if self.rows else mx.array([], mx.int32)

    def forget_before(self, position: int) -> None:
        """Drop the rows of positions below `position` (a sliding-window layer's, which no query
        still to come can reach)."""
        if position <= self.forgotten:
            return
        self.forgotten = position
        if not self.rows:
            return
        kept = np.flatnonzero(np.array(self.row_positions()) >= position)
        if len(kept) < self.rows:
            self.keep_rows(kept)

    def keep_rows(self, indices: np.ndarray) -> None:
        """Keep only the rows at these indices (in this order)."""
        index = mx.array(indices.astype(np.int32))
        self.keys = self.keys[..., index, :]
        self.values = self.values[..., index, :]
        self.positions = self.positions[index]
        self.rows = len(indices)

    # mlx-lm's cache protocol: what the model's own forward pass and generate_step call

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """The model's forward pass: new tokens at the next positions, then every row."""
        count = keys.shape[2]
        self.append(keys, values, mx.arange(self.offset, self.offset + count, dtype=mx.int32))
        self.offset += count
        return self.fetch()

    def make_mask(self, N: int, return_array: bool = False, window_size: int | None = None):
        """Causal on original positions for N new tokens. Every cached row precedes them, so the
        bottom-right "causal" mask is exact; an explicit one compares positions. window_size is
        never set: a sliding-window model's forward goes through the engine's blocks."""
        if not return_array:
            return "causal" if N > 1 else None
        queries = mx.arange(self.offset, self.offset + N, dtype=mx.int32)
        return causal_mask(mx.concatenate([self.row_positions(), queries]), queries)

    def ends_at(self, position: int) -> None:
        """The context now ends before `position`: a step's tokens are in (those it pruned
        before this layer have no rows here) or a rolled-back step's are gone."""
        self.offset = position

    def size(self) -> int:
        return self.rows

    def empty(self) -> bool:
        return self.rows == 0

    @property
    def nbytes(self) -> int:
        if self.keys is None:
            return 0
        return self.keys.nbytes + self.values.nbytes + self.positions.nbytes

    @property
    def state(self) -> tuple[mx.array, mx.array, mx.array, int, int]:
        keys, values = self.fetch() if self.rows else (mx.array([]), mx.array([]))
        return keys, values, self.row_positions(), self.offset, self.forgotten

    @state.setter
    def state(self, value: tuple) -> None:
        keys, values, positions, offset, forgotten = value
        self.rows = positions.size
        self.keys, self.values = (keys, values) if self.rows else (None, None)
        self.positions = positions.astype(mx.int32) if self.rows else None
        self.offset = int(offset)
        self.forgotten = int(forgotten)
        self.window, self.next_check = None, 0  # the window is the model's: LazyState sets it

    def is_trimmable(self) -> bool:
        return True

    def trimmable_to(self, offset: int) -> bool:
        """Whether the layer still holds every row a token at `offset` would attend to."""
        return self.window is None or self.forgotten <= max(0, offset - self.window)

    def trim(self, n: int) -> int:
        """Forget the last n positions (rows of revived older tokens stay); LazyState.trimmable_to
        says first whether a sliding-window layer kept what the shorter context needs."""
        n = min(self.offset, n)
        self.offset -= n
        if self.rows:
            kept = np.flatnonzero(np.array(self.row_positions()) < self.offset)
            if not kept.size or kept[-1] == kept.size - 1:  # the last rows go: nothing moves
                self.rows = kept.size
            elif kept.size < self.rows:
                self.keep_rows(kept)
        return n


class LazyAux(CacheEntry):
    """The context's per-token bookkeeping, stored as the last entry of the cache list so that
    mlx-lm's save_prompt_cache / load_prompt_cache carry it: token ids, depths and Aux slots.

    Everything is on the device, so a decode step (whose token id mlx-lm keeps on the device
    while it pipelines) never waits for the host. `depth_counts` is the host's copy of how many
    tokens sit at each depth, kept exact by the revival policy without reading the device.
    """

    def __init__(self) -> None:
        self.ids: mx.array | None = None  # int32 token id per position
        self.depth: mx.array | None = None  # int32 per position
        self.hidden: mx.array | None = None  # (positions, hidden size): the Aux slots
        self.length = 0
        self.depth_counts: np.ndarray | None = None

    def extend(self, tokens: mx.array, depth: int) -> None:
        """New tokens at the end of the context, at `depth` until a step says otherwise."""
        start, end = self.length, self.length + tokens.size
        self.ids = _grown(self.ids, start, end, (tokens.size,), mx.int32, 0)
        self.depth = _grown(self.depth, start, end, (tokens.size,), mx.int32, 0)
        if self.hidden is not None:
            shape = (tokens.size, self.hidden.shape[1])
            self.hidden = _grown(self.hidden, start, end, shape, self.hidden.dtype, 0)
        self.ids[start:end] = tokens.astype(mx.int32)
        self.depth[start:end] = depth
        self.length = end
        if self.depth_counts is not None:
            self.depth_counts[depth] += tokens.size

    def move(
        self,
        positions: mx.array,
        depth: int | mx.array,
        was: int | None,
        hidden: mx.array | None = None,
    ) -> None:
        """Every change of depth goes through here: the tokens at `positions` now hold KV in
        layers 0..depth-1 (a depth each, or one for all) and `hidden`, if given, in their Aux
        slots. was: the depth they all
        had, which keeps the host's counts exact without reading the device (None: unknown,
        counted again on next use)."""
        if hidden is not None:
            self.hidden[positions] = hidden
        self.depth[positions] = depth
        if was is None:
            self.depth_counts = None
        elif self.depth_counts is not None:
            self.depth_counts[was] -= positions.size
            self.depth_counts[depth] += positions.size

    def make_slots(self, hidden_size: int, dtype: mx.Dtype) -> None:
        """The Aux slots, made when a step first prunes: a context that never prunes (`off`,
        short prompts) holds no hidden state beside its KV."""
        if self.hidden is None:
            self.hidden = mx.zeros((self.ids.shape[0], hidden_size), dtype)

    def depths(self) -> mx.array:
        return self.depth[: self.length]

    def counts(self, num_layers: int) -> np.ndarray:
        """Tokens per depth 0..num_layers, a copy: read from the device once, then kept exact
        on the host by `extend` and `move`."""
        if self.depth_counts is None:
            depths = np.array(self.depths()) if self.length else np.zeros(0, np.int32)
            self.depth_counts = np.bincount(depths, minlength=num_layers + 1)
        return self.depth_counts.copy()

    @property
    def state(self) -> tuple[mx.array, mx.array, mx.array, int]:
        """Saved: ids, depths, Aux slots, and -1 in the slot where a removed completion mode
        kept a position, so files keep one format (earlier files load, later ones load there)."""
        if not self.length:
            return mx.array([], mx.int32), mx.array([], mx.int32), mx.array([]), -1
        hidden = mx.array([]) if self.hidden is None else self.hidden[: self.length]
        return self.ids[: self.length], self.depths(), hidden, -1

    @state.setter
    def state(self, value: tuple) -> None:
        ids, depth, hidden, _ = value
        self.length = ids.size
        self.ids = ids.astype(mx.int32) if self.length else None
        self.depth = depth.astype(mx.int32) if self.length else None
        self.hidden = hidden if hidden.size else None
        self.depth_counts = None

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        n = min(self.length, n)
        self.length -= n
        self.depth_counts = None
        return n

    def empty(self) -> bool:
        return self.length == 0

    @property
    def nbytes(self) -> int:
        if self.ids is None:
            return 0
        slots = 0 if self.hidden is None else self.hidden.nbytes
        return slots + self.depth.nbytes + self.ids.nbytes


register_cache_classes(LazyKVCache, LazyAux)  # so mlx-lm's load_prompt_cache finds them


class LazyState(list):
    """A lazy context: one LazyKVCache per layer, then the LazyAux entry.

    It is an mlx-lm prompt cache (a list of caches), so `prompt_cache=state` works in mlx-lm's
    generate_step, trim_prompt_cache and save_prompt_cache. One state serves a prompt, its decode
    steps and later chat turns.
    """

    def __init__(self, model: nn.Module, entries: list[Any] | None = None) -> None:
        self.adapter: LlamaAdapter = adapter_for(model)
        self.num_layers = len(self.adapter.layers)
        self.dtype = self.adapter.embed(mx.array([0])).dtype
        windows = self.adapter.sliding_windows
        if entries is None:
            entries = [LazyKVCache(window) for window in windows] + [LazyAux()]
        if len(entries) != self.num_layers + 1 or not isinstance(entries[-1], LazyAux):
            raise LazymlxError(
                f"this saved context does not fit the model: {len(entries) - 1} layers cached, "
                f"the model has {self.num_layers}; load it with the model that saved it"
            )
        for cache, window in zip(entries[:-1], windows, strict=True):
            cache.window = window
        super().__init__(entries)
        self.record: list[tuple[int, list[int]]] | None = None  # tests: (layer, positions computed)
        self.completion_chunk: int | None = None  # tokens of its next paced completion unit

    @property
    def layers(self) -> list[LazyKVCache]:
        return self[: self.num_layers]

    @property
    def aux(self) -> LazyAux:
        return self[-1]

    @property
    def offset(self) -> int:
        """Tokens in the context (the next token's position), like mlx-lm's cache.offset."""
        return self.aux.length

    @property
    def tokens(self) -> list[int]:
        """The context's token ids (read from the device)."""
        return self.aux.ids[: self.offset].tolist() if self.offset else []

    def forget_out_of_window(self, layer: int, before: int) -> None:
        """On a sliding-window layer, drop the rows no query still to come can reach: older than
        `window` (plus FORGET_SLACK) before both `before` (the first position the coming
        computation adds there) and the first token still to be computed there (one pruned
        earlier, which a later step or completion may revive there).
        It looks once every FORGET_SLACK positions, so a decode step rarely reads the device or
        copies rows."""
        cache = self[layer]
        if cache.window is None or before < cache.next_check:
            return
        reach = before - cache.window - FORGET_SLACK
        if reach - cache.forgotten < FORGET_SLACK:
            return
        cache.next_check = before + FORGET_SLACK
        depths = self.aux.depths()
        # waiting there (to be computed there, or pruned there: any config may revive it there)
        waiting = mx.where(depths <= layer + 1, mx.arange(depths.size), depths.size)
        first_waiting = int(mx.min(waiting).item()) if depths.size else 0
        cache.forget_before(min(reach, first_waiting - cache.window - FORGET_SLACK))

    def forget_out_of_windows(self, before: int, ranked: Container[int]) -> None:
        """forget_out_of_window on every layer but the `ranked` ones (a config's pruning layers,
        whose ranking reads every row)."""
        if self.adapter.windowed:
            for layer in range(self.num_layers):
                if layer not in ranked:
                    self.forget_out_of_window(layer, before)

    def pruning_layers(self, config: LazyConfig) -> dict[int, float]:
        """The config's pruning layers on this model (global layers only, where it has local
        ones): layer → the share of the tokens reaching it that go on."""
        return config.pruning_layers(self.num_layers, self.adapter.ranking_layers)

    def first_cuts(self, config: LazyConfig) -> list[int]:
        """The layers a prompt step's first cut may fall at on this model (LazyConfig.first_cuts)."""
        return config.first_cuts(self.num_layers, self.adapter.ranking_layers)

    def trimmable_to(self, offset: int) -> bool:
        """Whether the context can be cut back to its first `offset` tokens: every
        sliding-window layer still holds the rows the next token there would attend to."""
        return all(cache.trimmable_to(offset) for cache in self.layers)

    def pairs(self, start: int = 0, end: int | None = None) -> int:
        """(token, layer) pairs computed for positions start..end, each exactly once: the depths."""
        return int(self.aux.depths()[start:end].sum().item()) if self.offset else 0

    @property
    def kv_bytes(self) -> int:
        return sum(cache.nbytes for cache in self.layers)

    @property
    def aux_bytes(self) -> int:
        return self.aux.nbytes

    def check_memory(self, tokens: int) -> None:
        """Refuse a context whose weights, KV, Aux and attention scores can't fit in memory.

        MLX's CPU attention materializes one chunk's (heads × chunk × tokens) scores; they are
        counted on every backend, an upper bound where the fused kernels don't. Under tensor
        parallelism each rank counts its own share against the smallest machine's memory, so
        every rank decides alike.
        """
        a = self.adapter
        weights = sum(p.nbytes for _, p in tree_flatten(a.model.parameters()))
        per_token = (
            self.num_layers * 2 * a.num_kv_heads * a.head_dim + a.hidden_size
        ) * self.dtype.size
        scores = a.num_heads * min(tokens, 2048) * tokens * 4
        needed = weights + tokens * per_token + scores
        available = hooks.smallest(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        if needed > 0.8 * available:
            raise LazymlxError(
                f"{tokens} tokens of context need about {needed / 1e9:.1f} GB for weights, keys, "
                f"values, Aux slots and attention, more than this machine's "
                f"{available / 1e9:.1f} GB allows; shorten the prompt"
            )
