"""Convert a Llama-architecture GGUF file into an mlx-lm model directory.

`mx.load` reads GGUF directly; Q4_0, Q4_1 and Q8_0 tensors come back as MLX affine-quantized
triples (weight, scales, biases; group size 32) and F16/F32 as arrays. We rename the tensors to
the Hugging Face names mlx-lm expects, undo llama.cpp's q/k row permutation (so the model uses
ordinary half-split rope), and write config.json, safetensors and a tokenizer. Quantized weights
are kept where MLX has fast kernels for them (Metal) and dequantized to fp32 elsewhere.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.utils import make_shards

from lazymlx.errors import LazymlxError
from lazymlx.models.gguf_tokenizer import write_tokenizer

GGUF_GROUP_SIZE = 32  # every GGUF block format MLX reads quantized (Q4_0, Q4_1, Q8_0) uses 32
SUPPORTED_ARCHITECTURES = ("llama",)

GGUF_TOP_LEVEL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
GGUF_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|scales|biases)")
_TOP_TENSOR = re.compile(r"(\w+)\.(weight|scales|biases)")

Progress = Callable[[int, int], None]


def read_gguf(path: Path) -> tuple[dict[str, mx.array], dict[str, Any]]:
    """Tensors and metadata, metadata as plain Python values."""
    try:
        tensors, raw = mx.load(str(path), return_metadata=True)
    except (RuntimeError, ValueError) as error:
        raise LazymlxError(f"cannot read {path} as GGUF ({error}); check the file") from None
    metadata = {k: v.tolist() if isinstance(v, mx.array) else v for k, v in raw.items()}
    return tensors, metadata


def hf_name(gguf_name: str) -> str:
    if match := _BLOCK_TENSOR.fullmatch(gguf_name):
        layer, part, kind = match.groups()
        if part in GGUF_BLOCK_NAMES:
            return f"model.layers.{layer}.{GGUF_BLOCK_NAMES[part]}.{kind}"
    elif (match := _TOP_TENSOR.fullmatch(gguf_name)) and match.group(1) in GGUF_TOP_LEVEL_NAMES:
        return f"{GGUF_TOP_LEVEL_NAMES[match.group(1)]}.{match.group(2)}"
    raise LazymlxError(
        f"GGUF tensor {gguf_name!r} has no Llama counterpart; is this a Llama model?"
    )


def unpermute_rope_rows(rows: mx.array, n_heads: int) -> mx.array:
    """Undo llama.cpp's interleaving of q/k rows so half-split (non-traditional) rope applies.

    Works on a weight and on its quantization scales/biases alike: it only reorders rows.
    """
    shape = rows.shape
    return (
        rows.reshape(n_heads, shape[0] // n_heads // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)
    )


def llama_config(metadata: dict[str, Any], tensors: dict[str, mx.array]) -> dict[str, Any]:
    architecture = metadata.get("general.architecture")
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise LazymlxError(
            f"GGUF architecture {architecture!r} is not supported "
            f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    if "rope_freqs.weight" in tensors:
        raise LazymlxError(
            "this GGUF uses Llama-3.1 rope frequency factors, which the import does not handle; "
            "use the model's mlx-community version instead"
        )

    def get(key: str, default: Any = None) -> Any:
        value = metadata.get(f"llama.{key}", default)
        if value is None:
            raise LazymlxError(f"GGUF metadata lacks llama.{key}; the file is incomplete")
        return value

    hidden, heads = int(get("embedding_length")), int(get("attention.head_count"))
    config: dict[str, Any] = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": int(get("block_count")),
        "intermediate_size": int(get("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(get("attention.head_count_kv", heads)),
        "head_dim": int(get("attention.key_length", hidden // heads)),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(get("rope.freq_base", 10000.0)),
        "rope_traditional": False,
        "vocab_size": len(metadata["tokenizer.ggml.tokens"]),
        "max_position_embeddings": int(get("context_length", 4096)),
        "tie_word_embeddings": "output.weight" not in tensors,
        "bos_token_id": metadata.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": metadata.get("tokenizer.ggml.eos_token_id"),
    }
    if metadata.get("llama.rope.scaling.type") == "linear":
        config["rope_scaling"] = {
            "type": "linear",
            "factor": float(metadata["llama.rope.scaling.factor"]),
        }
    return config


def _bits(weight: mx.array, scales: mx.array) -> int:
    return weight.shape[-1] * 32 // (scales.shape[-1] * GGUF_GROUP_SIZE)


def convert_weights(
    tensors: dict[str, mx.array],
    config: dict[str, Any],
    *,
    dequantize: bool,
    progress: Progress | None = None,
) -> dict[str, mx.array]:
    """GGUF tensors → mlx-lm weights (fp32 when dequantize, else quantized triples kept)."""
    heads = {
        "self_attn.q_proj": config["num_attention_heads"],
        "self_attn.k_proj": config["num_key_value_heads"],
    }
    weights: dict[str, mx.array] = {}
    quantized_bits: list[int] = []
    names = [n for n in tensors if not n.endswith((".scales", ".biases"))]
    for done, name in enumerate(names, 1):
        base = name.removesuffix(".weight")
        parts = {"weight": tensors[name]}
        if f"{base}.scales" in tensors:
            parts["scales"] = tensors[f"{base}.scales"]
            parts["biases"] = tensors[f"{base}.biases"]
        target = hf_name(name).removesuffix(".weight")
        module = target.split(".", 3)[-1] if target.startswith("model.layers.") else ""
        if module in heads:
            parts = {k: unpermute_rope_rows(v, heads[module]) for k, v in parts.items()}
        if "scales" in parts:
            bits = _bits(parts["weight"], parts["scales"])
            quantized_bits.append(bits)
            if dequantize:
                weight = mx.dequantize(
                    parts["weight"], parts["scales"], parts["biases"], GGUF_GROUP_SIZE, bits
                )
                parts = {"weight": weight}
        if dequantize:
            parts = {"weight": parts["weight"].astype(mx.float32)}
        for kind, value in parts.items():
            weights[f"{target}.{kind}"] = value
        mx.eval(list(parts.values()))
        if progress:
            progress(done, len(names))
    if quantized_bits and not dequantize:
        # mlx-lm infers each layer's bits from its shapes; this only sets the default
        most_common = max(set(quantized_bits), key=quantized_bits.count)
        config["quantization"] = {"group_size": GGUF_GROUP_SIZE, "bits": most_common}
    return weights


def save_weights(weights: dict[str, mx.array], out_dir: Path) -> None:
    shards = make_shards(weights)
    names = (
        ["model.safetensors"]
        if len(shards) == 1
        else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    )
    weight_map = {}
    for shard, name in zip(shards, names, strict=True):
        mx.save_safetensors(str(out_dir / name), shard, metadata={"format": "mlx"})
        weight_map.update(dict.fromkeys(shard, name))
    index = {
        "metadata": {"total_size": sum(v.nbytes for v in weights.values())},
        "weight_map": weight_map,
    }
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def convert_gguf(
    gguf_path: Path, out_dir: Path, *, dequantize: bool, progress: Progress | None = None
) -> Path:
    """Write an mlx-lm model directory at out_dir atomically: complete, or not there at all."""
    tensors, metadata = read_gguf(gguf_path)
    config = llama_config(metadata, tensors)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    staging.chmod(0o755)  # mkdtemp's 0o700 would make a shared models directory unreadable
    try:
        weights = convert_weights(tensors, config, dequantize=dequantize, progress=progress)
        save_weights(weights, staging)
        (staging / "config.json").write_text(json.dumps(config, indent=2))
        write_tokenizer(metadata, staging)
        (staging / "lazymlx_source.json").write_text(
            json.dumps({"gguf": str(gguf_path), "dequantized": dequantize}, indent=2)
        )
        try:
            staging.rename(out_dir)
        except OSError:
            if not (out_dir / "config.json").exists():  # not a concurrent twin: a real failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir
