"""The models lazymlx knows here: the registry's, then other converted models in the cache
(a GGUF's conversion, a hub model), each with whether its presets were calibrated on it.

Its own module beside the registry: it asks engine.presets which models are calibrated, and
engine.presets asks the registry where the models live.
"""

from __future__ import annotations

from lazymlx.engine.presets import calibrated
from lazymlx.models.registry import REGISTRY, converted_dir, directory_size, local_models


def model_rows() -> list[dict]:
    """The registry's models, then other converted models in the cache (a GGUF's conversion,
    a hub model): one dict each, as `models list --json` prints them."""
    rows = []
    listed = set()
    for name, source in REGISTRY.items():
        target = converted_dir(name)
        listed.add(target)
        ready = (target / "config.json").exists()
        gguf = source.gguf_path()
        on_disk = (directory_size(target) if ready else 0) + (gguf.stat().st_size if gguf else 0)
        rows.append(
            {
                "name": name,
                "status": "ready" if ready else "pulled" if gguf else "not pulled",
                "description": source.title,
                "family": source.family,
                "layers": source.layers,
                "context": source.context,
                "kind": "instruct" if source.instruct else "base",
                "calibrated": calibrated(name),
                "bytes_on_disk": on_disk,
                "path": str(target),
            }
        )
    for path in local_models():
        if path not in listed:
            rows.append(
                {"name": path.name, "status": "ready", "description": "", "path": str(path)}
                | {"calibrated": calibrated(str(path)), "bytes_on_disk": directory_size(path)}
            )
    return rows
