"""What lazymlx takes from mlx-lm beyond its public API (lazymlx/engine/mlx_lm_private.py) is
still there in the installed mlx-lm, and no other module reaches for a private name of mlx-lm.

An mlx-lm upgrade that drops one fails here, by name, before it fails somewhere deep."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm.models.cache import load_prompt_cache, save_prompt_cache

from lazymlx.engine import mlx_lm_private
from lazymlx.engine.cache import LazyAux, LazyKVCache

REPO = Path(__file__).resolve().parents[1]


def test_mlx_lm_loads_a_saved_lazy_context_by_its_class_names(tmp_path):
    """load_prompt_cache finds a saved entry's class by name in mlx_lm.models.cache, where
    register_cache_classes put the engine's."""
    layer, aux = LazyKVCache(), LazyAux()
    layer.update_and_fetch(mx.ones((1, 2, 3, 4)), mx.zeros((1, 2, 3, 4)))
    aux.extend(mx.array([5, 6, 7]), depth=1)
    path = tmp_path / "context.safetensors"
    save_prompt_cache(str(path), [layer, aux])
    loaded_layer, loaded_aux = load_prompt_cache(str(path))
    assert type(loaded_layer) is LazyKVCache and type(loaded_aux) is LazyAux
    assert loaded_layer.offset == 3 and loaded_layer.fetch()[0].shape == (1, 2, 3, 4)
    assert loaded_aux.ids.tolist() == [5, 6, 7] and loaded_aux.depths().tolist() == [1, 1, 1]


def test_mlxlm_still_has_what_the_harness_sets_and_calls():
    """LazyLM sets MLXLM's attributes and calls its methods: they must still be MLXLM's own."""
    pytest.importorskip("lm_eval")
    from mlx_lm.evaluate import MLXLM

    missing = [
        name for name in mlx_lm_private.MLXLM_METHODS if not callable(getattr(MLXLM, name, None))
    ]
    assert missing == [], f"mlx_lm.evaluate.MLXLM no longer has these methods: {missing}"
    source = inspect.getsource(MLXLM)
    unused = [
        name
        for name in mlx_lm_private.MLXLM_ATTRIBUTES
        if not re.search(rf"self\.{name}\b", source)
    ]
    assert unused == [], f"mlx_lm.evaluate.MLXLM no longer reads these attributes: {unused}"


def _private_imports(path: Path) -> list[str]:
    """`module.name` for each underscore name the file imports from mlx_lm."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mlx_lm"):
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return found


def test_only_mlx_lm_private_imports_mlx_lm_private_names():
    wrapper = REPO / "lazymlx" / "engine" / "mlx_lm_private.py"
    found = {
        path.relative_to(REPO).as_posix(): names
        for folder in ("lazymlx", "models", "cli")
        for path in sorted((REPO / folder).rglob("*.py"))
        if path != wrapper and (names := _private_imports(path))
    }
    assert found == {}, "import these through lazymlx/engine/mlx_lm_private.py"


def test_the_private_name_finder_finds_one(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from mlx_lm.server import _format_top_logprobs, ModelProvider\n")
    assert _private_imports(source) == ["mlx_lm.server._format_top_logprobs"]
