"""The line a command says about a model its presets were not calibrated on: once, the first
time it runs here, what the preset computes and what calibrating would cost on this machine;
after that, a shorter one."""

from __future__ import annotations

import json

from lazymlx.cli.console import err


def calibration_note(preset: str, model: str) -> str | None:
    """What to say, once the model is loaded, when its presets were not calibrated on it: the
    built-in rules were chosen on other models, not checked on this one."""
    from lazymlx.engine.presets import calibrated
    from lazymlx.parallel import collectives

    if preset not in ("default", "gentle", "fast") or collectives.rank() != 0:
        return None
    if calibrated(model):
        return None
    return (
        f"{model} has no calibrated presets: {preset!r} is a built-in rule, chosen on other "
        f"models, not checked on this one; `lazymlx calibrate -m {model}` fits one to it"
    )


def first_use_note(preset: str, model: str, loaded, quiet: bool = False) -> tuple[str | None, bool]:
    """The calibration note, and whether it is the first-use one: the first time an
    uncalibrated model runs here, instead one line saying what the preset computes and how
    long `lazymlx calibrate` would take on this machine, timed on a short stock prompt
    (seconds, once per model): the moment a user first meets an uncalibrated model is the
    moment to say what calibrating costs. A quiet run shows no note, so it keeps the first use
    for later."""
    from lazymlx.parallel import collectives

    note = calibration_note(preset, model)
    # a group's ranks run the model together: rank 0 cannot time it alone
    if note is None or quiet or collectives.size() > 1 or not _first_time(model):
        return note, False
    from lazymlx.engine.presets import resolve_preset
    from lazymlx.evals.calibration import expected_minutes
    from lazymlx.models.adapters import adapter_for

    minutes = expected_minutes(*loaded, model)
    adapter = adapter_for(loaded[0])  # a windowed model prunes only at its global layers
    config = resolve_preset(preset, model)
    share = config.work_share(2048, len(adapter.layers), adapter.ranking_layers, fewest=True)
    what = (
        "runs every prompt whole"
        if share >= 1
        else f"is a built-in rule, {share:.0%} of the prompt work at 2k tokens"
        + (" where the question points at the text, else all of it" if config.point else "")
    )
    return (
        f"{model} is not calibrated: {preset!r} {what}; "
        f"`lazymlx calibrate -m {model}` takes about {minutes:.0f} minutes on this machine"
        + (" (--minutes 10 fits it to ten)" if minutes > 10 else "")
    ), True


def told(loaded, preset: str, model: str):
    """The loaded model, after its first-use line where it has one (the server loads in its
    generation thread, so the line comes as the model is ready)."""
    note, first = first_use_note(preset, model, loaded)
    if first:
        say_note(note)
    return loaded


def say_note(note: str | None) -> None:
    """The calibration note, dim, on stderr (none: nothing)."""
    if note:
        err.print(note, style="dim", markup=False, soft_wrap=True)


def _first_time(model: str) -> bool:
    """Whether this model has not been used here before, marking it used (told.json beside the
    saved presets, written atomically as every state file is)."""
    from lazymlx.engine.atomic import write_atomic
    from lazymlx.engine.presets import model_key, presets_file

    path = presets_file().with_name("told.json")
    try:
        used = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        used = {}
    key = model_key(model)
    if key in used:
        return False
    used[key] = True
    write_atomic(path, lambda staged: staged.write_text(json.dumps(used)))
    return True
