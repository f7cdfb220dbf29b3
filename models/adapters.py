"""How the engine takes an mlx-lm model apart: embedding, per-block query/key/value, head.

The engine runs its own layer loop but every computation goes through the model's own modules,
so weights, quantization and rope scaling stay mlx-lm's. Families differ in how a block turns
its normed input into queries, keys and values (biases live inside the Linear modules; Qwen3
and Gemma 3 add per-head RMS norms), in how the attention output and the MLP join the residual
stream (Gemma 3 norms both), in the embedding's scale, and in which layers attend only to a
sliding window of recent positions (Gemma 3: five layers in six).
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.gemma3_text import clip_residual

from lazymlx.errors import LazymlxError


class LlamaAdapter:
    """Llama, Mistral (mlx-lm maps it to llama) and Qwen2 (q/k/v biases are in the Linears)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.layers = model.model.layers
        attn = self.layers[0].self_attn
        # the heads this process holds: all of them, or its share under tensor parallelism
        self.num_heads, self.num_kv_heads = attn.n_heads, attn.n_kv_heads
        self.hidden_size = model.args.hidden_size
        self.head_dim = getattr(model.args, "head_dim", None) or (
            self.hidden_size // model.args.num_attention_heads
        )
        # per layer: the sliding window a layer attends over (positions), None for all of them
        self.sliding_windows: list[int | None] = [None] * len(self.layers)

    @property
    def windowed(self) -> bool:
        return any(self.sliding_windows)

    @property
    def ranking_layers(self) -> list[int] | None:
        """The layers that may prune on a sliding-window model: its global ones, the only
        ones whose attention sees every token (None: every layer may)."""
        if not self.windowed:
            return None
        return [layer for layer, window in enumerate(self.sliding_windows) if window is None]

    def embed(self, tokens: mx.array) -> mx.array:
        return self.model.model.embed_tokens(tokens)

    def logits(self, hidden: mx.array) -> mx.array:
        hidden = self.model.model.norm(hidden)
        if hasattr(self.model, "lm_head"):
            return self.model.lm_head(hidden)
        return self.model.model.embed_tokens.as_linear(hidden)

    def queries_keys_values(
        self, attn: nn.Module, x: mx.array
    ) -> tuple[mx.array, mx.array, mx.array]:
        """Un-rotated (batch, heads, tokens, head_dim) projections of the normed input."""
        batch, length, _ = x.shape
        q = attn.q_proj(x).reshape(batch, length, self.num_heads, -1)
        k = attn.k_proj(x).reshape(batch, length, self.num_kv_heads, -1)
        v = attn.v_proj(x).reshape(batch, length, self.num_kv_heads, -1)
        q, k = self.normed_heads(attn, q, k)
        return tuple(a.transpose(0, 2, 1, 3) for a in (q, k, v))

    def normed_heads(self, attn: nn.Module, q: mx.array, k: mx.array) -> tuple[mx.array, mx.array]:
        return q, k

    def finish_block(self, block: nn.Module, x: mx.array, attended: mx.array) -> mx.array:
        """The block's output from its input and its attention output (after o_proj)."""
        h = x + attended
        return h + block.mlp(block.post_attention_layernorm(h))


class Qwen3Adapter(LlamaAdapter):
    """Qwen3: RMS norms on each query and key head before rope."""

    def normed_heads(self, attn: nn.Module, q: mx.array, k: mx.array) -> tuple[mx.array, mx.array]:
        return attn.q_norm(q), attn.k_norm(k)


class Gemma3Adapter(Qwen3Adapter):
    """Gemma 3: a scaled embedding, norms after attention and around the MLP, sliding windows."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__(model)
        window = model.args.sliding_window
        self.sliding_windows = [
            window if block.self_attn.is_sliding else None for block in self.layers
        ]

    def embed(self, tokens: mx.array) -> mx.array:
        h = super().embed(tokens)
        return h * mx.array(self.hidden_size**0.5, mx.bfloat16).astype(h.dtype)  # as mlx-lm

    def finish_block(self, block: nn.Module, x: mx.array, attended: mx.array) -> mx.array:
        h = clip_residual(x, block.post_attention_layernorm(attended))
        mlp = block.mlp(block.pre_feedforward_layernorm(h))
        return clip_residual(h, block.post_feedforward_layernorm(mlp))


ADAPTERS: dict[str, type[LlamaAdapter]] = {
    "llama": LlamaAdapter,
    "mistral": LlamaAdapter,
    "qwen2": LlamaAdapter,
    "qwen3": Qwen3Adapter,
    "gemma3_text": Gemma3Adapter,
}


def adapter_for(model: nn.Module) -> LlamaAdapter:
    """The adapter for a loaded mlx-lm model; a clear error for families the engine can't run."""
    model_type = getattr(getattr(model, "args", None), "model_type", None)
    if model_type not in ADAPTERS:
        raise LazymlxError(
            f"lazy pruning does not support model type {model_type!r}; supported: "
            f"{', '.join(ADAPTERS)} (run it with --lazy off)"
        )
    scaling = getattr(model.args, "rope_scaling", None) or {}
    rope_type = scaling.get("type") or scaling.get("rope_type")  # mlx-lm reads both keys
    if rope_type == "dynamic":  # its offset must be a single int, so tokens can't be scattered
        raise LazymlxError(
            "lazy pruning does not support dynamic NTK rope scaling; run with --lazy off"
        )
    if any(getattr(layer, "use_sliding", False) for layer in model.model.layers):
        raise LazymlxError(
            "lazy pruning does not support sliding-window attention layers; run with --lazy off"
        )
    return ADAPTERS[model_type](model)
