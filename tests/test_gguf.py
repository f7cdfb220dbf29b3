"""GGUF import: names, q/k row order, every supported tensor type, tokenizer, atomic writes."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from conftest import reference_logits_from_gguf, write_tiny_gguf
from mlx.utils import tree_flatten
from mlx_lm.utils import load as mlx_lm_load

from lazymlx.errors import LazymlxError
from lazymlx.models import gguf as gguf_import
from lazymlx.models.gguf import convert_gguf
from lazymlx.models.gguf_file import SUPPORTED_ARCHITECTURES, GGUFFile, preflight
from lazymlx.models.tiny import tokenizer_metadata

PROMPT = [1, 87, 85, 71, 84, 201, 260, 78, 78, 81, 261, 84, 71, 223, 19, 20, 21, 2]
LOGITS_ATOL = 1e-4  # fp32 end to end; the two models differ only in rope layout and op order


@pytest.fixture(scope="module")
def converted(tiny_gguf, tmp_path_factory) -> Path:
    return convert_gguf(tiny_gguf[0], tmp_path_factory.mktemp("conv") / "fp32", dequantize=True)


def test_config_from_metadata(converted: Path):
    config = json.loads((converted / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["num_hidden_layers"] == 4
    assert config["num_attention_heads"] == 4 and config["num_key_value_heads"] == 2
    assert config["rope_traditional"] is False
    assert config["tie_word_embeddings"] is True
    assert config["eos_token_id"] == 2
    assert "quantization" not in config


def test_weights_match_the_originals_within_quantization_error(tiny_gguf, converted: Path):
    """Q8_0 q/o projections come back close to the HF-layout originals: names and row order are right."""
    _, originals = tiny_gguf
    model, _ = mlx_lm_load(str(converted))
    params = dict(tree_flatten(model.parameters()))
    assert set(params) == set(originals)
    for name in (
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.3.self_attn.o_proj.weight",
    ):
        original = originals[name]
        scale = np.abs(original).max()
        np.testing.assert_allclose(np.array(params[name]), original, atol=scale / 100)
    # Q4 k_proj: coarser, but a wrong row order would be off by the weights' own size
    k = "model.layers.1.self_attn.k_proj.weight"
    error = np.abs(np.array(params[k]) - originals[k]).max()
    assert error < np.abs(originals[k]).max() / 4
    for value in params.values():
        assert value.dtype == mx.float32


def test_logits_match_direct_gguf_load(tiny_gguf, converted: Path):
    model, _ = mlx_lm_load(str(converted))
    ours = model(mx.array([PROMPT]))[0]
    reference = reference_logits_from_gguf(tiny_gguf[0], PROMPT)
    assert mx.abs(ours - reference).max().item() < LOGITS_ATOL


def test_quantized_import_keeps_quantized_layers(tiny_gguf, converted: Path, tmp_path: Path):
    quantized_dir = convert_gguf(tiny_gguf[0], tmp_path / "q", dequantize=False)
    config = json.loads((quantized_dir / "config.json").read_text())
    assert config["quantization"]["group_size"] == 32
    model, _ = mlx_lm_load(str(quantized_dir))
    layer = model.model.layers[0]
    assert (
        isinstance(layer.self_attn.q_proj, nn.QuantizedLinear) and layer.self_attn.q_proj.bits == 8
    )
    assert (
        isinstance(layer.self_attn.k_proj, nn.QuantizedLinear) and layer.self_attn.k_proj.bits == 8
    )
    assert isinstance(layer.mlp.down_proj, nn.Linear)  # F16 stays a plain layer
    fp32_model, _ = mlx_lm_load(str(converted))
    diff = mx.abs(model(mx.array([PROMPT]))[0] - fp32_model(mx.array([PROMPT]))[0]).max().item()
    assert diff < 5e-2  # requantized to MLX's 8-bit groups of 32, the rest bfloat16


Q = gguf.GGMLQuantizationType
# every other type llama.cpp writes, one per kind of tensor (K-quants need rows of 256)
OTHER_TYPES = {
    "attn_q": Q.Q5_0, "attn_k": Q.BF16, "attn_v": Q.Q5_1, "attn_output": Q.Q2_K,
    "ffn_gate": Q.Q3_K, "ffn_up": Q.Q4_K, "ffn_down": Q.Q5_K, "token_embd": Q.Q6_K,
}  # fmt: skip


def test_every_llama_cpp_type_imports_as_gguf_py_reads_it(tmp_path: Path):
    """Each tensor of the model equals what gguf-py's own reader and dequantizer make of the
    file (q/k rows un-interleaved), and the model runs."""
    path = tmp_path / "types.gguf"
    write_tiny_gguf(path, types=OTHER_TYPES, hidden_size=256)
    model, _ = mlx_lm_load(str(convert_gguf(path, tmp_path / "out", dequantize=True)))
    params = dict(tree_flatten(model.parameters()))
    reader = gguf.GGUFReader(str(path))
    seen = set()
    for tensor in reader.tensors:
        name = gguf_import.hf_name(tensor.name, gguf_import.ARCHITECTURES["llama"])
        expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        module = name.split(".")[-2]
        if module in ("q_proj", "k_proj"):
            heads = 4 if module == "q_proj" else 2
            expected = gguf_import.unpermute_rope_rows(expected, heads)
        np.testing.assert_array_equal(np.array(params[name]), expected.astype(np.float32))
        seen.add(tensor.tensor_type)
    assert seen >= set(OTHER_TYPES.values())
    assert mx.isfinite(model(mx.array([PROMPT]))).all().item()


def test_tokenizer_matches_the_metadata(converted: Path):
    _, tokenizer = mlx_lm_load(str(converted))
    tokens = tokenizer_metadata()["tokenizer.ggml.tokens"]
    ids = tokenizer.encode("the 2024<|im_end|>", add_special_tokens=False)
    assert [tokens[i] for i in ids] == ["t", "he", "Ġ", "2", "0", "2", "4", "<|im_end|>"]
    assert tokenizer.decode(ids) == "the 2024<|im_end|>"
    assert tokenizer.eos_token_ids == {2}
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_conversion_is_atomic(tiny_gguf, tmp_path: Path, monkeypatch):
    def fail(*_args, **_kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(gguf_import, "write_tokenizer", fail)
    with pytest.raises(OSError):
        convert_gguf(tiny_gguf[0], tmp_path / "model", dequantize=True)
    assert list(tmp_path.iterdir()) == []  # neither the target nor a staging directory remains


def test_progress_reports_every_tensor(tiny_gguf, tmp_path: Path):
    seen = []
    convert_gguf(
        tiny_gguf[0], tmp_path / "m", dequantize=True, progress=lambda d, t: seen.append((d, t))
    )
    assert seen[-1][0] == seen[-1][1] == len(seen)


@pytest.mark.parametrize("architecture", ["gemma", "phi3", "mamba"])
def test_unsupported_architecture_is_refused_by_name_before_any_tensor(
    tmp_path: Path, monkeypatch, architecture: str
):
    path = tmp_path / f"{architecture}.gguf"
    write_tiny_gguf(path, architecture=architecture)

    def never(*_args):
        raise AssertionError("a tensor was read")

    monkeypatch.setattr(GGUFFile, "tensor", never)
    message = f"architecture '{architecture}' is not supported"
    with pytest.raises(LazymlxError, match=message):
        preflight(path)  # reads the header up to general.architecture, the first key
    with pytest.raises(LazymlxError, match=message):
        convert_gguf(path, tmp_path / "out", dequantize=True)
    assert not (tmp_path / "out").exists()


def test_the_early_check_knows_the_architectures_the_import_converts():
    assert tuple(gguf_import.ARCHITECTURES) == SUPPORTED_ARCHITECTURES


def test_unsupported_tokenizer_is_a_clear_error(tmp_path: Path):
    path = tmp_path / "wordpiece.gguf"
    write_tiny_gguf(path, **{"tokenizer.ggml.model": "bert"})
    with pytest.raises(LazymlxError, match="tokenizer model 'bert' is not supported"):
        convert_gguf(path, tmp_path / "out", dequantize=True)
    assert not (tmp_path / "out").exists()


def test_not_a_gguf_is_a_clear_error(tmp_path: Path):
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"not a gguf at all")
    with pytest.raises(LazymlxError, match="cannot read .* as GGUF"):
        convert_gguf(path, tmp_path / "out", dequantize=True)


@pytest.mark.real_model
def test_real_model_logits_match_direct_gguf_load(real_gguf: Path, real):
    model, tokenizer = real
    prompt = tokenizer.encode("The capital of France is Paris. The capital of Italy is")
    ours = model(mx.array([prompt]))[0]
    reference = reference_logits_from_gguf(real_gguf, prompt)
    assert mx.abs(ours - reference).max().item() < LOGITS_ATOL * 10  # 30 layers of fp32 rounding
