"""lazymlx: on-device LLM inference on MLX, with LazyLLM token pruning for a faster first token.

The public API is `load`, `generate`, `stream_generate`, `LazyConfig` (the pruning schedule),
`LazyState` (the engine's context, kept across chat turns) and `LLM` (a model served to an app's
threads, one generation at a time, each a cancellable `Stream`). They are imported on first use so that
`import lazymlx` (and `lazymlx --help`) stays fast and so the fast BLAS is bound before MLX loads.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from lazymlx.platform import survive_new_shapes, use_fast_blas

use_fast_blas()
survive_new_shapes()

try:
    __version__ = version("lazymlx")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["load", "generate", "stream_generate", "LazyConfig", "LazyState", "LLM", "Stream"]

_PUBLIC = {
    "load": "lazymlx.models.loading",
    "generate": "lazymlx.generation",
    "stream_generate": "lazymlx.generation",
    "LazyConfig": "lazymlx.engine.config",
    "LazyState": "lazymlx.engine.cache",
    "LLM": "lazymlx.llm",
    "Stream": "lazymlx.llm",
}

if TYPE_CHECKING:
    from lazymlx.engine.cache import LazyState
    from lazymlx.engine.config import LazyConfig
    from lazymlx.generation import generate, stream_generate
    from lazymlx.llm import LLM, Stream
    from lazymlx.models.loading import load


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'lazymlx' has no attribute {name!r}")
