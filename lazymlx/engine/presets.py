"""Preset lookup: a model's calibrated presets, then the built-in ones.

Calibrated presets belong to one model (a schedule tuned on SmolLM2 means nothing for a 7B
model). Each registry model's ship with lazymlx in lazymlx/engine/calibrated/NAME.json:
`lazymlx calibrate --ship` writes a model's default, gentle and fast there. A user's own
(`lazymlx calibrate`) are stored per model name in one JSON file beside the converted models,
written atomically so an interrupted save never leaves a half-written file, and come first.
"""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from lazymlx.engine.atomic import write_atomic
from lazymlx.engine.config import PRESETS, LazyConfig
from lazymlx.errors import LazymlxError
from lazymlx.models.registry import models_dir

SHIPPED = Path(__file__).with_name("calibrated")  # one file per registry model
# The preset name of stock mlx-lm (no engine, no config: lazy=None), everywhere a preset is named
STOCK = "off"


def presets_file() -> Path:
    return models_dir() / "presets.json"


def shipped_file(model: str) -> Path:
    return SHIPPED / f"{model}.json"


def shipped_presets(model: str) -> dict[str, LazyConfig]:
    """The calibrated presets lazymlx ships for a registry model (none for other models)."""
    path = shipped_file(model)
    if not path.is_file():
        return {}
    entries = json.loads(path.read_text())
    return {name: config_from_dict(entry["config"]) for name, entry in entries.items()}


def calibrated(model: str) -> bool:
    """Whether the model's default was calibrated on it (shipped, or by the user)."""
    return "default" in saved_presets(model) or "default" in shipped_presets(model)


def model_key(model: str) -> str:
    """Paths are stored absolute so `./m` and `m` name one model; registry and hub names as given."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def _read() -> dict[str, dict[str, Any]]:
    path = presets_file()
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise LazymlxError(
            f"cannot read saved presets in {path} ({error}); fix or delete that file"
        ) from error


def saved_presets(model: str) -> dict[str, LazyConfig]:
    saved = _read().get(model_key(model), {})
    return {name: config_from_dict(entry["config"]) for name, entry in saved.items()}


# Settings presets saved before 2026-12-02 still write, now constants (lazymlx/engine/config.py,
# read through LazyConfig's properties): read where they hold the value every preset has, as
# every preset calibrate saved does.
RETIRED = (
    "keep_first",
    "window",
    "past_template",
    "pool",
    "revive",
    "revive_steps",
    "prompt_revive",
)


def config_from_dict(entry: dict[str, Any]) -> LazyConfig:
    """A saved config (fields it lacks take LazyConfig's defaults); one that sets a knob
    LazyConfig does not have (or a former one to another value than its constant's) is refused
    rather than run as something else."""
    known = {f.name for f in fields(LazyConfig)}
    every = LazyConfig()
    entry = {k: v for k, v in entry.items() if k not in RETIRED or getattr(every, k) != v}
    unknown = sorted(set(entry) - known)
    if unknown:
        raise LazymlxError(
            f"a saved preset sets {', '.join(unknown)}, which lazymlx does not have; calibrate "
            "the model again (lazymlx calibrate) or delete that preset"
        )
    return LazyConfig(**entry)


def preset_names(model: str) -> list[str]:
    return list(dict.fromkeys([*PRESETS, *shipped_presets(model), *saved_presets(model)]))


def resolve_preset(name: str, model: str | None) -> LazyConfig:
    """A preset for this model: the user's calibrated ones first, then those lazymlx ships for
    it, then the built-in ones (only those for a model without a name). Every entry point
    (the CLI, `LLM`, `generate(lazy=...)`) resolves names here, through `lazy_config`, which
    turns "off" into stock mlx-lm (no config, lazy=None).

    Bench and eval run comparison strategies beside these (lazymlx/evals/strategies.py).
    """
    own = {} if model is None else shipped_presets(model) | saved_presets(model)
    if name in own:
        return own[name]
    if name in PRESETS:
        return PRESETS[name]
    if name == STOCK:
        raise LazymlxError(
            "'off' is stock mlx-lm, not a preset of the engine: run it with lazy=None (or "
            "--lazy off); keep-all is the engine keeping every token"
        )
    raise LazymlxError(
        f"unknown lazy preset {name!r} for {model or 'this model'}; choose one of: "
        f"off (stock mlx-lm), {', '.join(PRESETS if model is None else preset_names(model))}"
    )


def lazy_config(name: str, model: str | None) -> LazyConfig | None:
    """The config a preset name stands for: None for STOCK ('off': stock mlx-lm, which each
    entry point runs itself), the one place that name turns into stock; else resolve_preset."""
    return None if name == STOCK else resolve_preset(name, model)


def ship_preset(model: str, name: str, config: LazyConfig, details: dict[str, Any]) -> Path:
    """Write a calibrated preset into the package's data for a registry model (a maintainer's
    step, after calibrating it: `lazymlx calibrate --ship`)."""
    path = shipped_file(model)
    entries = json.loads(path.read_text()) if path.is_file() else {}
    entries[name] = {"config": asdict(config), "calibration": details}
    return _write_json(path, entries)


def save_preset(model: str, name: str, config: LazyConfig, details: dict[str, Any]) -> Path:
    """Store a calibrated preset for a model (replacing one of the same name), atomically."""
    if name in (STOCK, "keep-all"):
        raise LazymlxError(f"{name!r} is a built-in strategy; save the preset under another name")
    everything = _read()
    entry = {"config": asdict(config), "calibration": details}
    everything.setdefault(model_key(model), {})[name] = entry
    return _write_json(presets_file(), everything)


def _write_json(path: Path, data: Any) -> Path:
    """Write `data` as JSON, atomically."""
    return write_atomic(path, lambda staged: staged.write_text(json.dumps(data, indent=1) + "\n"))
