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
        self.depth = np.zeros(0, dtype=np.int32)
        self.pair_count = np.zeros((0, self.num_layers), dtype=np.int32)
        self.keys: list[mx.array | None] = [None] * self.num_layers
        self.values: list[mx.array | None] = [None] * self.num_layers
        self.aux: mx.array | None = None
        self.capacity = 0

    @property
    def offset(self) -> int:
        """Tokens in the state (the next token's position); same meaning as mlx-lm's cache.offset."""
        return len(self.tokens)

    def bytes_per_token(self) -> int:
        a = self.adapter
        kv = self.num_layers * 2 * a.num_kv_heads * a.head_dim
        return (kv + a.hidden_size) * self.dtype.size

    def check_memory(self, tokens: int) -> None:
        """Refuse a context whose KV + Aux buffers and one layer's attention scores can't fit."""
        attention = self.adapter.num_heads * tokens * tokens * 4
        needed = tokens * self.bytes_per_token() + attention
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if needed > 0.8 * available:
            raise LazymlxError(
                f"{tokens} tokens of context need about {needed / 1e9:.1f} GB for keys, values, "
                f"Aux slots and attention, more than this machine's {available / 1e9:.1f} GB "
                "allows; shorten the prompt"
            )

    def append(self, tokens: list[int]) -> np.ndarray:
        """Add tokens at depth 0, growing the buffers; returns their positions."""
        start, end = self.offset, self.offset + len(tokens)
        self.tokens += tokens
        self.depth = np.concatenate([self.depth, np.zeros(len(tokens), np.int32)])
        self.pair_count = np.concatenate(
            [self.pair_count, np.zeros((len(tokens), self.num_layers), np.int32)]
        )
        if end > self.capacity:
            self._grow(GROWTH * ((end + GROWTH - 1) // GROWTH))
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
        self.capacity = capacity
        mx.eval(self.keys, self.values, self.aux)

    def trim(self, length: int) -> None:
        """Forget every token from position `length` on (a chat turn re-rendered differently).

        What remains is still a valid state: a kept token's KV only ever attended to earlier
        positions. Stale buffer rows are overwritten when positions are reused.
        """
        del self.tokens[length:]
        self.depth = self.depth[:length].copy()
        self.pair_count = self.pair_count[:length].copy()

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

    def record_step(self, step: StepRecord) -> None:
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


def _index(positions: np.ndarray) -> slice | mx.array:
    """A slice for a run of consecutive positions (cheap update/view), else a gather index."""
    first, last = int(positions[0]), int(positions[-1])
    if last - first + 1 == len(positions):
        return slice(first, last + 1)
    return mx.array(positions.astype(np.int32))
