"""The engine on MLX-quantized weights (4-bit and 8-bit QuantizedLinear), what Mac users run.

Keep-all must equal stock and pruning must compute each (token, layer) pair once, its prompt
work what the schedule counts, with the weights still quantized afterwards. On Linux's CPU
backend lazymlx dequantizes to fp32 at load (MLX's CPU has no fast quantized matmul); a GPU
backend keeps them (models.registry.keep_quantized), and that load path is tested here with
keep_quantized made true. A quantized registry model at a short length is in the real-model
test at the end (marked real_model).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.nn as nn
import pytest
from conftest import assert_keep_all_reproduces_stock, engine_greedy, random_model, random_tokens
from test_engine import ENGINE_KEEP_ALL, assert_each_pair_once_and_depths_agree

import lazymlx
from lazymlx import LazyConfig, LazyState
from lazymlx.engine.config import PRESETS


def quantized(model: nn.Module, bits: int) -> nn.Module:
    nn.quantize(model, group_size=32, bits=bits)
    return model


def is_quantized(model: nn.Module) -> bool:
    return any(isinstance(m, nn.QuantizedLinear) for m in model.modules())


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("config", [LazyConfig(), ENGINE_KEEP_ALL], ids=["keep-all", "engine"])
def test_keep_all_reproduces_stock_on_quantized_weights(bits: int, config: LazyConfig):
    model = quantized(random_model("llama"), bits)
    assert_keep_all_reproduces_stock(model, random_tokens(150), config=config)
    assert is_quantized(model)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("preset", ["gentle", "fast"])
def test_the_presets_prune_quantized_weights_each_pair_once(bits: int, family: str, preset: str):
    model = quantized(random_model(family, num_layers=8), bits)
    config = PRESETS[preset]
    state = LazyState(model)
    state.record = []
    prompt = random_tokens(1100)  # past the gentle rule's floor (1,024 tokens), so both prune
    engine_greedy(model, prompt, 12, config, state)
    assert_each_pair_once_and_depths_agree(state)
    prompt_step = sum(len(positions) for _, positions in state.record[:8])
    assert prompt_step == round(config.work_share(len(prompt), 8) * len(prompt) * 8)
    assert prompt_step < len(prompt) * 8 and is_quantized(model)


def _quantized_dir(tiny_model_dir: Path, target: Path, bits: int) -> Path:
    """The tiny model written as mlx-lm writes a quantized model (what mlx-community ships)."""
    from mlx_lm.utils import load_config, quantize_model, save_config, save_model

    model, _ = lazymlx.load(str(tiny_model_dir))
    shutil.copytree(tiny_model_dir, target)
    config = load_config(target)
    model, config = quantize_model(model, config, group_size=32, bits=bits)
    for stale in target.glob("model*.safetensors*"):
        stale.unlink()
    save_model(target, model)
    save_config(config, target / "config.json")
    return target


def test_a_quantized_model_stays_quantized_where_weights_are_kept(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from lazymlx.models import loading

    path = _quantized_dir(tiny_model_dir, tmp_path / "tiny-4bit", bits=4)
    assert json.loads((path / "config.json").read_text())["quantization"]["bits"] == 4
    assert not is_quantized(lazymlx.load(str(path))[0])  # the CPU default: fp32
    monkeypatch.setattr(loading, "keep_quantized", lambda: True)  # as on Metal or CUDA
    model, tokenizer = lazymlx.load(str(path))
    assert is_quantized(model)
    prompt = random_tokens(1100, vocab=250)  # past the default's floor: it prunes

    def answer(lazy):
        return [r.token for r in lazymlx.stream_generate(model, tokenizer, prompt, 8, lazy=lazy)]

    assert answer(LazyConfig()) == answer(None)
    *_, last = lazymlx.stream_generate(model, tokenizer, prompt, 1, lazy=PRESETS["gentle"])
    assert last.lazy.work_share == pytest.approx(
        PRESETS["gentle"].work_share(len(prompt), len(model.layers))
    )
    assert last.lazy.work_share < 1


@pytest.mark.real_model
def test_keep_all_reproduces_stock_on_a_4bit_registry_model(real):
    """SmolLM2-135M quantized to MLX 4-bit (groups of 64) in memory, at ~150 tokens: MLX's CPU
    quantized matmul is slow (a 300-token prompt took CI a minute), so the prompt is short and
    the answer a few tokens."""
    from lazymlx.prompts import passkey_prompt

    model, tokenizer = lazymlx.load("smollm2-135m")  # a fresh copy: `real` stays fp32
    nn.quantize(model, group_size=64, bits=4)
    prompt = tokenizer.encode(passkey_prompt(tokenizer, 150).text)
    assert is_quantized(model) and 120 <= len(prompt) <= 180
    # through the engine's own layer-major prompt step (a ratio rounding up to every token)
    assert_keep_all_reproduces_stock(model, prompt, steps=4, config=ENGINE_KEEP_ALL)
