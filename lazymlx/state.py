"""Everything LazyLLM remembers between steps: keys/values by position, depths, Aux slots, counts.

A token's *depth* is how many layers hold its keys and values. Since KV is never deleted and a
token enters each step at layer 0, those layers are always 0..depth-1, so a token that resumes
at its depth needs exactly one saved hidden state: the output of layer depth-1, written to its
Aux slot when it was dropped. The bookkeeping (depths, which pairs were computed) lives on the
host in numpy because selection is decided there anyway; only tensors live in MLX.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from lazymlx.errors import LazymlxError
from lazymlx.models.adapters import LlamaAdapter, adapter_for

GROWTH = 256  # buffers grow in steps like mlx-lm's KVCache, so decoding doesn't copy per token


@dataclass
class StepRecord:
    """What one step did, layer by layer: the positions computed and the size of the set present."""

    computed: list[np.ndarray] = field(default_factory=list)
    present: list[int] = field(default_factory=list)

    @property
    def pairs(self) -> int:
        return sum(len(c) for c in self.computed)


class LazyState:
    """Per-layer KV addressed by token position, a depth and an Aux slot per token, and counters.

    One state serves a prompt, its decode steps and later chat turns: each appends tokens with
    the same step, so tokens pruned in earlier turns can still be revived.
    """

    def __init__(self, model: nn.Module, record: bool = False) -> None:
        self.adapter: LlamaAdapter = adapter_for(model)
        self.num_layers = len(self.adapter.layers)
        self.dtype = self.adapter.embed(mx.array([0])).dtype
        self.record = record  # keep every step's StepRecord in `history` (tests, analysis)
        self.history: list[StepRecord] = []
        self.last_step = StepRecord()
        self.tokens: list[int] = []
        self._depth = np.zeros(0, dtype=np.int32)  # sized to capacity, like the buffers
        self._pair_count = np.zeros((0, self.num_layers), dtype=np.int32)
        self.keys: list[mx.array | None] = [None] * self.num_layers
        self.values: list[mx.array | None] = [None] * self.num_layers
        self.aux: mx.array | None = None
        self.capacity = 0

    @property
    def depth(self) -> np.ndarray:
        """Per token: how many layers (0..depth-1) hold its KV."""
        return self._depth[: self.offset]

    @property
    def pair_count(self) -> np.ndarray:
        """Per token and layer: how many times that pair was computed (the engine keeps it <= 1)."""
        return self._pair_count[: self.offset]

    @property
    def offset(self) -> int:
        """Tokens in the state (the next token's position); same meaning as mlx-lm's cache.offset."""
        return len(self.tokens)

    def bytes_per_token(self) -> int:
        a = self.adapter
        kv = self.num_layers * 2 * a.num_kv_heads * a.head_dim
        return (kv + a.hidden_size) * self.dtype.size

    def check_memory(self, tokens: int) -> None:
        """Refuse a context whose weights, KV + Aux buffers and attention scores can't fit.

        Off Metal, MLX's attention materializes one layer's (heads × tokens × tokens) scores.
        """
        weights = sum(p.nbytes for _, p in tree_flatten(self.adapter.model.parameters()))
        scores = 0 if mx.metal.is_available() else self.adapter.num_heads * tokens * tokens * 4
        needed = weights + tokens * self.bytes_per_token() + scores
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if needed > 0.8 * available:
            raise LazymlxError(
                f"{tokens} tokens of context need about {needed / 1e9:.1f} GB for weights, keys, "
                f"values, Aux slots and attention, more than this machine's "
                f"{available / 1e9:.1f} GB allows; shorten the prompt"
            )

    def append(self, tokens: list[int]) -> np.ndarray:
        """Add tokens at depth 0, growing the buffers; returns their positions."""
        start, end = self.offset, self.offset + len(tokens)
        if end > self.capacity:
            self._grow(GROWTH * ((end + GROWTH - 1) // GROWTH))
        self.tokens += tokens
        self._depth[start:end] = 0
        self._pair_count[start:end] = 0
        return np.arange(start, end)

    def _grow(self, capacity: int) -> None:
        a, extra = self.adapter, capacity - self.capacity
        kv_shape = (1, a.num_kv_heads, extra, a.head_dim)

        def grown(buffer: mx.array | None, shape: tuple[int, ...], axis: int) -> mx.array:
            zeros = mx.zeros(shape, self.dtype)
            return zeros if buffer is None else mx.concatenate([buffer, zeros], axis=axis)

        self.keys = [grown(k, kv_shape, 2) for k in self.keys]
        self.values = [grown(v, kv_shape, 2) for v in self.values]
        self.aux = grown(self.aux, (extra, a.hidden_size), 0)
        self._depth = np.concatenate([self._depth, np.zeros(extra, np.int32)])
        self._pair_count = np.concatenate(
            [self._pair_count, np.zeros((extra, self.num_layers), np.int32)]
        )
        self.capacity = capacity
        mx.eval(self.keys, self.values, self.aux)

    def trim(self, length: int) -> None:
        """Forget every token from position `length` on (a chat turn re-rendered differently).

        What remains is still a valid state: a kept token's KV only ever attended to earlier
        positions. Stale rows are reset or overwritten when positions are reused.
        """
        del self.tokens[length:]

    def write_kv(self, layer: int, positions: np.ndarray, keys: mx.array, values: mx.array) -> None:
        index = _index(positions)
        self.keys[layer][:, :, index, :] = keys
        self.values[layer][:, :, index, :] = values

    def read_kv(self, layer: int, positions: np.ndarray) -> tuple[mx.array, mx.array]:
        index = _index(positions)
        return self.keys[layer][:, :, index, :], self.values[layer][:, :, index, :]

    def save_aux(self, positions: np.ndarray, hidden: mx.array) -> None:
        self.aux[_index(positions)] = hidden

    def read_aux(self, positions: np.ndarray) -> mx.array:
        return self.aux[_index(positions)]

    def commit(
        self, step: StepRecord, depth: np.ndarray, dropped: list[tuple[np.ndarray, mx.array]]
    ) -> None:
        """Take in a finished step: new depths, its pair counts, Aux slots of dropped tokens."""
        self.depth[:] = depth
        for layer, computed in enumerate(step.computed):
            self.pair_count[computed, layer] += 1
        for positions, hidden in dropped:
            self.save_aux(positions, hidden)
        self.last_step = step
        if self.record:
            self.history.append(step)

    @property
    def kv_bytes(self) -> int:
        return sum(b.nbytes for b in (*self.keys, *self.values) if b is not None)

    @property
    def aux_bytes(self) -> int:
        return 0 if self.aux is None else self.aux.nbytes

    def buffers(self) -> list[mx.array]:
        return [b for b in (*self.keys, *self.values, self.aux) if b is not None]


def contiguous(positions: np.ndarray) -> bool:
    """Sorted unique positions forming one run (a slice, a single rope offset)."""
    return int(positions[-1]) - int(positions[0]) + 1 == len(positions)


def _index(positions: np.ndarray) -> slice | mx.array:
    """A slice for a run of consecutive positions (cheap update/view), else a gather index."""
    if contiguous(positions):
        return slice(int(positions[0]), int(positions[-1]) + 1)
    return mx.array(positions.astype(np.int32))
