"""Shared fixtures: an isolated models directory, tiny random models, a tiny GGUF, the real model."""

from __future__ import annotations

import lazymlx  # first: it binds OpenBLAS, which only works before anything imports MLX
import lazymlx.models

# isort: split
import os
from pathlib import Path

import gguf
import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.generate import generate_step

from lazymlx.engine.model import LazyModel
from lazymlx.models.gguf import ARCHITECTURES, BLOCK_NAMES, TOP_LEVEL_NAMES, hf_name
from lazymlx.models.registry import (
    DEFAULT_MODEL,
    MODELS_DIR_ENV,
    REGISTRY,
    converted_dir,
    models_dir,
)
from lazymlx.models.tiny import random_weights, tiny_config, tokenizer_metadata, write_tiny_model

# One quantization type per kind of tensor, so one small file exercises every supported type.
GGUF_TYPES = {
    "attn_q": gguf.GGMLQuantizationType.Q8_0,
    "attn_k": gguf.GGMLQuantizationType.Q4_0,
    "attn_v": gguf.GGMLQuantizationType.Q4_1,
    "attn_output": gguf.GGMLQuantizationType.Q8_0,
    "ffn_gate": gguf.GGMLQuantizationType.Q4_1,
    "ffn_up": gguf.GGMLQuantizationType.Q4_0,
    "ffn_down": gguf.GGMLQuantizationType.F16,
    "token_embd": gguf.GGMLQuantizationType.Q8_0,
}


def _made_by_todays_converter(converted: Path) -> bool:
    """A conversion written after the last edit to the converter (every module of lazymlx's
    models package), so it is what converting now would write: `make test` converts each registry
    model as it pulls it, and converting again costs CI ~20 s a model."""
    stamp = converted / "lazymlx_source.json"
    converter = Path(lazymlx.models.__file__).parent.glob("*.py")
    return stamp.exists() and stamp.stat().st_mtime > max(p.stat().st_mtime for p in converter)


@pytest.fixture(scope="session", autouse=True)
def isolated_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Conversions go to a temporary models directory, never the user's cache; the registry
    GGUFs pulled there (`make test` pulls them) are linked in, so no test downloads, and so are
    their conversions where today's converter made them."""
    path = tmp_path_factory.mktemp("models")
    for name in REGISTRY:
        if (pulled := models_dir() / f"{name}.gguf").exists():
            (path / pulled.name).symlink_to(pulled)
        if _made_by_todays_converter(converted := converted_dir(name)):
            (path / converted.name).symlink_to(converted)
    old = os.environ.get(MODELS_DIR_ENV)
    os.environ[MODELS_DIR_ENV] = str(path)
    yield path
    if old is None:
        os.environ.pop(MODELS_DIR_ENV, None)
    else:
        os.environ[MODELS_DIR_ENV] = old


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="session")
def tiny(tiny_model_dir: Path):
    return lazymlx.load(str(tiny_model_dir))


def llama_cpp_permute(rows: np.ndarray, n_heads: int) -> np.ndarray:
    """The q/k row interleaving llama.cpp's converter applies (written out here independently)."""
    shape = rows.shape
    return (
        rows.reshape(n_heads, 2, shape[0] // n_heads // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)
    )


def gguf_name(hf: str) -> str:
    if hf.startswith("model.layers."):
        _, _, layer, module = hf.split(".", 3)
        part = {v: k for k, v in BLOCK_NAMES.items()}[module.removesuffix(".weight")]
        return f"blk.{layer}.{part}.weight"
    top = {v: k for k, v in TOP_LEVEL_NAMES.items()}[hf.removesuffix(".weight")]
    return f"{top}.weight"


def write_tiny_gguf(
    path: Path,
    seed: int = 0,
    architecture: str = "llama",
    types: dict | None = None,
    hidden_size: int = 64,
    **metadata_overrides,
) -> dict:
    """A Llama GGUF with Q4_0/Q4_1/Q8_0/F16/F32 tensors (or `types`, per kind of tensor); returns
    the HF-layout weights it encodes. gguf-py can't quantize K-quants: their blocks are random
    bytes below 0x3c, so every float16 scale in them is finite."""
    config = tiny_config(hidden_size=hidden_size)
    types = GGUF_TYPES if types is None else types
    rng = np.random.default_rng(seed)
    weights = {k: np.array(v) for k, v in random_weights(config, seed).items()}
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_uint32(f"{architecture}.block_count", config["num_hidden_layers"])
    writer.add_uint32(f"{architecture}.embedding_length", config["hidden_size"])
    writer.add_uint32(f"{architecture}.feed_forward_length", config["intermediate_size"])
    writer.add_uint32(f"{architecture}.attention.head_count", config["num_attention_heads"])
    writer.add_uint32(f"{architecture}.attention.head_count_kv", config["num_key_value_heads"])
    writer.add_uint32(f"{architecture}.context_length", config["max_position_embeddings"])
    writer.add_float32(f"{architecture}.attention.layer_norm_rms_epsilon", config["rms_norm_eps"])
    writer.add_float32(f"{architecture}.rope.freq_base", config["rope_theta"])
    metadata = tokenizer_metadata() | metadata_overrides
    writer.add_string("tokenizer.ggml.model", metadata["tokenizer.ggml.model"])
    writer.add_string("tokenizer.ggml.pre", metadata["tokenizer.ggml.pre"])
    writer.add_token_list(metadata["tokenizer.ggml.tokens"])
    writer.add_token_merges(metadata["tokenizer.ggml.merges"])
    writer.add_token_types(metadata["tokenizer.ggml.token_type"])
    for key in ("bos", "eos", "unknown", "padding"):
        writer.add_uint32(
            f"tokenizer.ggml.{key}_token_id", metadata[f"tokenizer.ggml.{key}_token_id"]
        )
    writer.add_bool("tokenizer.ggml.add_bos_token", False)
    writer.add_chat_template(metadata["tokenizer.chat_template"])
    heads = {"attn_q": config["num_attention_heads"], "attn_k": config["num_key_value_heads"]}
    for hf, value in weights.items():
        name = gguf_name(hf)
        part = name.split(".")[-2] if name.startswith("blk.") else name.split(".")[0]
        if part in heads:
            value = llama_cpp_permute(value, heads[part])
        qtype = types.get(part, gguf.GGMLQuantizationType.F32)
        if qtype == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(name, value.astype(np.float16))
        elif qtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(name, value.astype(np.float32))
        elif qtype.name.endswith("_K"):
            shape = gguf.quants.quant_shape_to_byte_shape(value.shape, qtype)
            blocks = rng.integers(0, 0x3C, size=shape, dtype=np.uint8)
            writer.add_tensor(name, blocks, raw_dtype=qtype)
        else:
            writer.add_tensor(
                name, gguf.quants.quantize(value.astype(np.float32), qtype), raw_dtype=qtype
            )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    return path, write_tiny_gguf(path)


def reference_logits_from_gguf(path: Path, tokens: list[int]) -> mx.array:
    """Logits of a model built straight from mx.load of the GGUF: weights dequantized, rows left
    in llama.cpp's interleaved order and interleaved (traditional) rope, no conversion code."""
    from mlx_lm.models import llama

    tensors, raw = mx.load(str(path), return_metadata=True)
    meta = {k: v.tolist() if isinstance(v, mx.array) else v for k, v in raw.items()}
    weights = {}
    for name in tensors:
        if name.endswith((".scales", ".biases")):
            continue
        base = name.removesuffix(".weight")
        value = tensors[name]
        if f"{base}.scales" in tensors:
            scales, biases = tensors[f"{base}.scales"], tensors[f"{base}.biases"]
            bits = value.shape[-1] * 32 // (scales.shape[-1] * 32)
            scales, biases = (
                scales.astype(mx.float32),
                biases.astype(mx.float32),
            )  # exact, as gguf-py
            value = mx.dequantize(value, scales, biases, group_size=32, bits=bits)
        weights[hf_name(name, ARCHITECTURES["llama"])] = value.astype(mx.float32)
    heads = int(meta["llama.attention.head_count"])
    args = llama.ModelArgs(
        model_type="llama",
        hidden_size=int(meta["llama.embedding_length"]),
        num_hidden_layers=int(meta["llama.block_count"]),
        intermediate_size=int(meta["llama.feed_forward_length"]),
        num_attention_heads=heads,
        num_key_value_heads=int(meta["llama.attention.head_count_kv"]),
        rms_norm_eps=float(meta["llama.attention.layer_norm_rms_epsilon"]),
        vocab_size=len(meta["tokenizer.ggml.tokens"]),
        rope_theta=float(meta["llama.rope.freq_base"]),
        rope_traditional=True,
        tie_word_embeddings="output.weight" not in tensors,
    )
    model = llama.Model(args)
    model.load_weights(list(weights.items()))
    return model(mx.array([tokens]))[0]


@pytest.fixture(scope="session")
def real_gguf() -> Path:
    path = REGISTRY[DEFAULT_MODEL].gguf_path()
    if path is None:
        pytest.fail(f"the default model is not pulled: `lazymlx models pull {DEFAULT_MODEL}`")
    return path


@pytest.fixture(scope="session")
def real(real_gguf: Path):
    """The real default model, converted once per test session into the isolated models dir."""
    return lazymlx.load(DEFAULT_MODEL)


def random_model(model_type: str = "llama", num_layers: int = 6, seed: int = 0, **overrides):
    """An mlx-lm model of a supported family with random weights (no tokenizer, for the engine)."""
    from mlx_lm.models import gemma3_text, llama, qwen2, qwen3

    args = {
        "model_type": model_type,
        "hidden_size": 64,
        "num_hidden_layers": num_layers,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": 300,
        "max_position_embeddings": 4096,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
    } | overrides
    module = {
        "llama": llama,
        "mistral": llama,
        "qwen2": qwen2,
        "qwen3": qwen3,
        "gemma3_text": gemma3_text,
    }[model_type]
    if model_type in ("qwen3", "gemma3_text"):
        args.setdefault("head_dim", 16)
    if model_type == "gemma3_text":  # a window shorter than the test prompts, a global layer in 3
        args = {
            "sliding_window": 24,
            "sliding_window_pattern": 3,
            "query_pre_attn_scalar": 16,
        } | args
    fields = module.ModelArgs.__dataclass_fields__
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs(**{k: v for k, v in args.items() if k in fields}))
    mx.eval(model.parameters())
    return model


def random_tokens(count: int, seed: int = 0, vocab: int = 300) -> list[int]:
    return np.random.default_rng(seed).integers(3, vocab, size=count).tolist()


def engine_greedy(model, prompt: list[int], steps: int, config, state=None, chunk: int = 2048):
    """Greedy decoding on the lazy context through mlx-lm's generate_step: (tokens, log-probs)."""
    state = state if state is not None else lazymlx.LazyState(model)
    wrapped = LazyModel(model, state, config, len(prompt), chunk)
    pairs = list(
        generate_step(
            mx.array(prompt), wrapped, max_tokens=steps, prompt_cache=state, prefill_step_size=chunk
        )
    )
    return [t for t, _ in pairs], [lp for _, lp in pairs]


def stock_greedy(model, prompt: list[int], steps: int):
    pairs = list(generate_step(mx.array(prompt), model, max_tokens=steps))
    return [t for t, _ in pairs], [lp for _, lp in pairs]


def assert_keep_all_reproduces_stock(
    model, prompt: list[int], steps: int = 32, config=None, chunk: int = 2048
) -> None:
    """The first check of every engine change: same greedy tokens, log-probs within 1e-4."""
    config = config or lazymlx.LazyConfig()
    ours, our_logprobs = engine_greedy(model, prompt, steps, config, chunk=chunk)
    theirs, their_logprobs = stock_greedy(model, prompt, steps)
    assert ours == theirs
    for a, b in zip(our_logprobs, their_logprobs, strict=True):
        assert mx.abs(a - b).max().item() < 1e-4


def constants(**values):
    """The engine's constants (lazymlx/engine/config.py: KEEP_FIRST, WINDOW, POOL, REVIVE,
    REVIVE_STEPS) set to other values for a block, so a tiny model's test can exercise them."""
    from unittest import mock

    return mock.patch.multiple("lazymlx.engine.config", **values)
