"""What lazymlx takes from mlx-lm beyond its public API, in one place.

Checked against mlx-lm 0.32.2. tests/test_mlx_lm_private.py fails, naming the name, when an
mlx-lm upgrade drops or changes one of these:

- A patch to mlx-lm's module: `register_cache_classes` sets the engine's cache classes
  (LazyKVCache, LazyAux) on `mlx_lm.models.cache`. mlx-lm's `load_prompt_cache` rebuilds each
  entry of a saved context as `globals()[class name].from_state(state)` in that module and takes
  no class map, so without the patch a saved lazy context cannot load through mlx-lm's own
  function (nor through a tensor-parallel group's loader, lazymlx/parallel/collectives.py,
  which looks the classes up there too).
- mlx-lm's lm-eval model, `mlx_lm.evaluate.MLXLM`, has no public way to wrap a model already
  loaded: lazymlx/evals/harness.py's LazyLM subclasses it, sets its MLXLM_ATTRIBUTES and calls
  its MLXLM_METHODS (stock's scores, computed by mlx-lm's own code).

Private names no longer used, and what does their work:
- `mlx_lm.models.cache._BaseCache`: the engine's caches implement the protocol mlx-lm's
  functions call on a cache list's entries (engine/cache.py's CacheEntry).
- `mlx_lm.server._format_top_logprobs`: lazymlx/llm.py picks the likeliest tokens itself.
- `mlx_lm.tokenizer_utils._byte_decoder`: lazymlx/server/logprobs.py builds GPT-2's byte table.
- `mlx_lm.evaluate._lstrip`, `_rstrip_until`: lazymlx/evals/harness.py's own two lines.
"""

from __future__ import annotations

import mlx_lm.models.cache as mlx_lm_cache

# what LazyLM (lazymlx/evals/harness.py) sets and calls on mlx_lm.evaluate.MLXLM
MLXLM_ATTRIBUTES = ("_model", "_max_tokens", "_batch_size", "_sampler")
MLXLM_METHODS = ("_tokenize", "_process_prompt", "_score_fn")


def register_cache_classes(*classes: type) -> None:
    """Set cache classes on mlx-lm's cache module, where load_prompt_cache finds a saved
    context's classes by name."""
    for cls in classes:
        setattr(mlx_lm_cache, cls.__name__, cls)
