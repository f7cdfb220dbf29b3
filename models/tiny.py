"""Tiny random Llama models with a byte-level tokenizer, built in code, for fast tests; and a
tokenizer for random-weight models of any vocabulary (numbered_tokenizer).

They go through the same paths as real models: written as an mlx-lm directory (or a GGUF by the
tests) and loaded by `lazymlx.load`, so tests exercise loading, templates and generation for real.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.models import llama
from mlx_lm.tokenizer_utils import TokenizerWrapper
from tokenizers import pre_tokenizers

from lazymlx.models.gguf import save_weights
from lazymlx.models.gguf_tokenizer import CONTROL_TOKEN, write_tokenizer

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a"]


def tokenizer_metadata() -> dict[str, Any]:
    """GGUF-style tokenizer metadata: 3 special tokens, the 256 byte symbols and a few merges."""
    tokens = SPECIAL_TOKENS + sorted(pre_tokenizers.ByteLevel.alphabet())
    tokens += ["".join(merge.split(" ")) for merge in _MERGES]
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": list(_MERGES),
        "tokenizer.ggml.token_type": [CONTROL_TOKEN] * len(SPECIAL_TOKENS)
        + [1] * (len(tokens) - len(SPECIAL_TOKENS)),
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.padding_token_id": 2,
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": CHATML_TEMPLATE,
    }


def tiny_config(
    num_layers: int = 4,
    hidden_size: int = 64,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int | None = None,
    context: int = 2048,
) -> dict[str, Any]:
    vocab_size = len(tokenizer_metadata()["tokenizer.ggml.tokens"])
    return {
        "model_type": "llama",
        "hidden_size": hidden_size,
        "num_hidden_layers": num_layers,
        "intermediate_size": intermediate_size or hidden_size * 2,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": vocab_size,
        "max_position_embeddings": context,
        "tie_word_embeddings": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def random_weights(config: dict[str, Any], seed: int = 0) -> dict[str, mx.array]:
    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    return dict(tree_flatten(model.parameters()))


def write_tiny_model(out_dir: Path, seed: int = 0, **shape: int) -> Path:
    """An mlx-lm model directory with random weights; `shape` overrides tiny_config's sizes."""
    out_dir.mkdir(parents=True, exist_ok=True)
    config = tiny_config(**shape)
    save_weights(random_weights(config, seed), out_dir)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    write_tokenizer(tokenizer_metadata(), out_dir)
    return out_dir


def numbered_tokenizer(vocab_size: int) -> TokenizerWrapper:
    """A tokenizer for a random-weight model of any vocabulary: every id is a word of its own
    ("<0>", "<1>", ...), so whatever id the model generates decodes, and it has no
    end-of-sequence token, so an answer runs its whole length. It lets a model with no real
    tokenizer (benchmarks/gpu/: no weights reach that machine) go through
    `lazymlx.stream_generate`, the path users run, with prompts given as token ids."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(WordLevel({f"<{i}>": i for i in range(vocab_size)}, unk_token="<0>"))
    words.pre_tokenizer = WhitespaceSplit()
    return TokenizerWrapper(PreTrainedTokenizerFast(tokenizer_object=words))
