"""Convert a GGUF file (llama, qwen2, qwen3, gemma3) into an mlx-lm model directory.

The header is read first (gguf_file.py, under a second) and everything the import can't handle
is refused by name before a tensor is read: the architecture, a tensor type, a tensor with no
counterpart in the mlx-lm model. Then each tensor is dequantized with gguf-py (every type
llama.cpp writes), renamed to the Hugging Face names mlx-lm expects and undone where llama.cpp
changed it (llama's q/k row interleaving, Gemma's norm weights stored with 1 added). On MLX's
CPU backend the weights are stored fp32 (it has no fast quantized or half matmul); on a GPU
backend matrices become MLX affine 8-bit (its fast kernels) and the rest bfloat16. config.json, safetensors and a tokenizer rebuilt from the metadata follow.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from gguf import GGMLQuantizationType as Q
from mlx_lm.utils import make_shards

from lazymlx.errors import LazymlxError
from lazymlx.models.gguf_file import GGUFFile, check_architecture, read_header
from lazymlx.models.gguf_tokenizer import check_tokenizer, write_tokenizer

Progress = Callable[[int, int], None]

# the types llama.cpp writes for these models
QUANTIZED = {Q.Q2_K, Q.Q3_K, Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q5_0, Q.Q5_1, Q.Q5_K, Q.Q6_K, Q.Q8_0}
SUPPORTED_TYPES = QUANTIZED | {Q.F32, Q.F16, Q.BF16}
GPU_GROUP_SIZE = 32  # GGUF blocks hold 32 weights (K-quants: sub-blocks of 16-32)

TOP_LEVEL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
# Gemma's block has a norm around each half: llama.cpp's ffn_norm is the one before the MLP
GEMMA_BLOCK_NAMES = BLOCK_NAMES | {
    "ffn_norm": "pre_feedforward_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
_BLOCK_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_TOP_TENSOR = re.compile(r"(\w+)\.(weight|bias)")


@dataclass(frozen=True)
class Architecture:
    """What one GGUF architecture needs: its mlx-lm model type and how tensors map over."""

    model_type: str
    block_names: dict[str, str] = field(default_factory=lambda: BLOCK_NAMES)
    interleaved_rope: bool = False  # llama.cpp permuted q/k rows for interleaved rope
    norms_plus_one: bool = False  # llama.cpp stored the RMSNorm weights with 1 added
    extra_config: Callable[[Callable[..., Any]], dict[str, Any]] = lambda get: {}


def _gemma3_config(get: Callable[..., Any]) -> dict[str, Any]:
    """llama.cpp fixes what Gemma 3's GGUF leaves out: local layers' rope base 10,000, one global
    layer in six, and the query scale 1/sqrt(head_dim) (27B aside, which the 270M-12B are not)."""
    head_dim = int(get("attention.key_length"))
    return {
        "sliding_window": int(get("attention.sliding_window")),
        "sliding_window_pattern": 6,
        "rope_local_base_freq": 10_000.0,
        "query_pre_attn_scalar": head_dim,
    }


ARCHITECTURES = {
    "llama": Architecture("llama", interleaved_rope=True),
    "qwen2": Architecture("qwen2"),
    "qwen3": Architecture("qwen3"),
    "gemma3": Architecture(
        "gemma3_text",
        block_names=GEMMA_BLOCK_NAMES,
        norms_plus_one=True,
        extra_config=_gemma3_config,
    ),
}


def architecture_of(gguf: GGUFFile) -> Architecture:
    name = gguf.metadata.get("general.architecture")
    check_architecture(name)
    return ARCHITECTURES[name]


def hf_name(gguf_name: str, arch: Architecture) -> str:
    if match := _BLOCK_TENSOR.fullmatch(gguf_name):
        layer, part, kind = match.groups()
        if part in arch.block_names:
            return f"model.layers.{layer}.{arch.block_names[part]}.{kind}"
    elif (match := _TOP_TENSOR.fullmatch(gguf_name)) and match.group(1) in TOP_LEVEL_NAMES:
        return f"{TOP_LEVEL_NAMES[match.group(1)]}.{match.group(2)}"
    raise LazymlxError(
        f"GGUF tensor {gguf_name!r} has no counterpart in mlx-lm's {arch.model_type} model; "
        "the file is not a plain text model of its architecture"
    )


def check_supported(gguf: GGUFFile) -> Architecture:
    """Everything that can refuse the file, from the header alone: before any tensor is read."""
    arch = architecture_of(gguf)
    if "rope_freqs.weight" in gguf.tensors:
        raise LazymlxError(
            "this GGUF uses Llama-3.1 rope frequency factors, which the import does not handle; "
            "use the model's mlx-community version instead"
        )
    for info in gguf.tensors.values():
        if info.qtype not in SUPPORTED_TYPES:
            raise LazymlxError(
                f"GGUF tensor {info.name!r} is stored as {info.qtype.name}, which the import does "
                f"not read (it reads {', '.join(sorted(t.name for t in SUPPORTED_TYPES))}); "
                "use a K-quant or Q8_0 file of the model"
            )
        hf_name(info.name, arch)
    check_tokenizer(gguf.metadata)
    return arch


def model_config(gguf: GGUFFile, arch: Architecture) -> dict[str, Any]:
    metadata = gguf.metadata
    prefix = metadata["general.architecture"]

    def get(key: str, default: Any = None) -> Any:
        value = metadata.get(f"{prefix}.{key}", default)
        if value is None:
            raise LazymlxError(f"GGUF metadata lacks {prefix}.{key}; the file is incomplete")
        return value

    hidden, heads = int(get("embedding_length")), int(get("attention.head_count"))
    config: dict[str, Any] = {
        "model_type": arch.model_type,
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
        "tie_word_embeddings": "output.weight" not in gguf.tensors,
        "bos_token_id": metadata.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": metadata.get("tokenizer.ggml.eos_token_id"),
    } | arch.extra_config(get)
    if get("rope.scaling.type", "none") == "linear":
        config["rope_scaling"] = {"type": "linear", "factor": float(get("rope.scaling.factor"))}
    return config


def unpermute_rope_rows(rows: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's interleaving of Llama q/k rows so half-split rope applies."""
    shape = rows.shape
    return (
        rows.reshape(n_heads, shape[0] // n_heads // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)
    )


def _gpu_bits(qtype: Q) -> int | None:
    """The MLX affine bits for a GGUF matrix on a GPU (None: keep floats). MLX picks its own
    grid per group, so 4 bits would add a second rounding as large as the file's own; 8 bits
    keep every quantized type within 1/30 of its grid step (measured in tests/test_gguf.py)."""
    return 8 if qtype in QUANTIZED else None


def convert_weights(
    gguf: GGUFFile,
    arch: Architecture,
    config: dict[str, Any],
    *,
    dequantize: bool,
    progress: Progress | None = None,
) -> dict[str, mx.array]:
    """GGUF tensors → mlx-lm weights: fp32 when dequantize, else MLX 4/8-bit and bfloat16."""
    heads = {
        "self_attn.q_proj": config["num_attention_heads"],
        "self_attn.k_proj": config["num_key_value_heads"],
    }
    weights: dict[str, mx.array] = {}
    layers: dict[str, dict[str, int]] = {}
    for done, info in enumerate(gguf.tensors.values(), 1):
        target = hf_name(info.name, arch)
        value = gguf.tensor(info.name)
        module = target.split(".", 3)[-1].rsplit(".", 1)[0]
        if arch.interleaved_rope and module in heads:
            value = unpermute_rope_rows(value, heads[module])
        if arch.norms_plus_one and target.endswith("norm.weight"):
            value = value - 1.0
        array = mx.array(value)
        bits = None if dequantize or value.ndim != 2 else _gpu_bits(info.qtype)
        if bits is not None:
            base = target.removesuffix(".weight")
            w, scales, biases = mx.quantize(array, GPU_GROUP_SIZE, bits)
            new = {target: w, f"{base}.scales": scales, f"{base}.biases": biases}
            layers[base] = {"group_size": GPU_GROUP_SIZE, "bits": bits}
        else:
            new = {target: array if dequantize else array.astype(mx.bfloat16)}
        mx.eval(list(new.values()))
        weights |= new
        if progress:
            progress(done, len(gguf.tensors))
    if layers:
        # mlx-lm reads per-layer settings from the quantization config by module path
        config["quantization"] = {"group_size": GPU_GROUP_SIZE, "bits": 8} | layers
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
    gguf = read_header(gguf_path)
    arch = check_supported(gguf)
    config = model_config(gguf, arch)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    staging.chmod(0o755)  # mkdtemp's 0o700 would make a shared models directory unreadable
    try:
        weights = convert_weights(gguf, arch, config, dequantize=dequantize, progress=progress)
        save_weights(weights, staging)
        del weights
        (staging / "config.json").write_text(json.dumps(config, indent=2))
        write_tokenizer(gguf.metadata, staging)
        source = {"gguf": str(gguf_path), "dequantized": dequantize}
        (staging / "lazymlx_source.json").write_text(json.dumps(source, indent=2))
        try:
            staging.rename(out_dir)
        except OSError:
            if not (out_dir / "config.json").exists():  # not a concurrent twin: a real failure
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir
