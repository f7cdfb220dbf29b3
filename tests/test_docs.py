"""The README and docs/*.md against the code and against themselves: schedules quoted for a
preset are the shipped ones, the option synopses show the real defaults, and no sentence runs
past 60 words.

The docs' convention for quoting a preset's schedule: the preset's name in backticks followed
by its schedule, `` `fast` 0.4@24% 0.4@57% ``, `` `fast` (0.4@24% ... ``, or
with an aside between commas, `` `gentle`, its default until then, 0.2@67% ``; a mass rule
as the candidate grammar writes it, `` `fast` (`mass0.95 1@24% 1@57% least0.02`) ``, with its
gate if it has one (`` from1536 ``: prompts under 1,536 tokens run whole). The model is the
last one named before it in the same paragraph, list item or table row (none, or "built-in"
just before the name: the built-in presets). A schedule written any other way (a former
default's, a candidate's) is not read as a preset's.
"""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path

import pytest
import typer

from lazymlx.cli import bench, calibrate_command, chat_command, evaluate, generate, harness, serve
from lazymlx.engine.config import PRESETS
from lazymlx.engine.presets import resolve_preset

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MAX_WORDS = 60
# how the docs name the registry's models
MODELS = {
    r"Qwen": "qwen2.5-coder-0.5b",
    r"SmolLM2|smollm2": "smollm2-135m",
    r"Gemma|gemma3": "gemma3-270m",
}
STEP = r"\d(?:\.\d+)?@\d+%"
QUOTE = re.compile(
    r"(?P<before>built-in )?`(?P<preset>[a-z][\w-]*)`(?: rule)?"
    rf"(?:[ (:]*`?|[,:] [^`;.()@\d]{{1,60}}, )(?:mass(?P<mass>[\d.]+) )?"
    rf"(?P<schedule>{STEP}(?: {STEP})*)(?: least(?P<least>[\d.]+))?(?: dense(?P<dense>[\d.]+))?"
    r"(?: point(?P<point>[\d.]+))?(?: sparse| revive)?(?: from(?P<min_prompt>\d+))?"
)
# a mass rule's knobs and its gate, as quoted and as LazyConfig names them
KNOBS = ("mass", "least", "dense", "point", "min_prompt")
UNGATED = PRESETS["gentle"].min_prompt  # the gate a preset quoted without " fromN" has
# a sentence ends at . ! or ? (and a closing bracket or quote) before a space; an abbreviation
# does not end one
SENTENCE_END = re.compile(
    r"(?<=[.!?])(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\betc\.)(?<!\bvs\.)(?<!\bcf\.)[)\"]?\s+"
)


def units(text: str) -> list[tuple[int, str]]:
    """The prose of a markdown file as (first line, text) units: paragraphs, list items, table
    rows and headings, each joined onto one line; code blocks are left out."""
    found: list[tuple[int, str]] = []
    lines: list[str] = []
    start, code = 0, False

    def close() -> None:
        if lines:
            found.append((start, " ".join(lines)))
            lines.clear()

    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("```"):
            close()
            code = not code
            continue
        if code:
            continue
        if not line or line.startswith(("|", "#")):
            close()
            if line:
                found.append((number, line))
            continue
        if re.match(r"([-*]|\d+\.) ", line):  # a list item starts a unit of its own
            close()
        if not lines:
            start = number
        lines.append(line)
    close()
    return found


def sentences(text: str) -> list[tuple[int, str]]:
    """Each sentence of the prose (tables left out), with the line its unit starts on."""
    return [
        (number, sentence)
        for number, unit in units(text)
        if not unit.startswith("|")
        for sentence in SENTENCE_END.split(unit)
    ]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_no_sentence_runs_past_60_words(path: Path):
    long = [
        f"{path.name}:{number}: {len(s.split())} words: {s[:80]}..."
        for number, s in sentences(path.read_text())
        if len(s.split()) > MAX_WORDS
    ]
    assert not long, "split these into shorter sentences:\n" + "\n".join(long)


def test_sentences_split_as_a_reader_splits_them():
    text = (
        "One, e.g. this. Two (a `b`). Three?\nFour\n\n```\nno. Code. Here.\n```\n| a. B. |\n- Five."
    )
    assert [s.strip(" .?") for _, s in sentences(text)] == [
        "One, e.g. this",
        "Two (a `b`)",
        "Three",
        "Four",
        "- Five",
    ]


def quotes(
    text: str,
) -> list[tuple[int, str | None, str, tuple[tuple[float, int], ...], dict[str, float]]]:
    """Each schedule quoted for a preset: (line, model or None, preset, ((ratio, depth %), ...),
    the mass rule's knobs it quotes)."""
    found = []
    for number, unit in units(text):
        for match in QUOTE.finditer(unit):
            named = [
                (hit.start(), model)
                for pattern, model in MODELS.items()
                for hit in re.finditer(pattern, unit[: match.start()])
            ]
            model = max(named)[1] if named and not match["before"] else None
            steps = tuple(
                (float(ratio), int(depth))
                for ratio, depth in re.findall(r"([\d.]+)@(\d+)%", match["schedule"])
            )
            knobs = {k: (int if k == "min_prompt" else float)(match[k]) for k in KNOBS if match[k]}
            found.append((number, model, match["preset"], steps, knobs))
    return found


def test_schedules_quoted_for_a_preset_are_the_shipped_ones():
    wrong, seen = [], 0
    for path in (REPO / "README.md", REPO / "docs" / "usage.md", REPO / "docs" / "distributed.md"):
        for number, model, preset, steps, knobs in quotes(path.read_text()):
            seen += 1
            config = resolve_preset(preset, model)
            shipped = tuple((ratio, round(depth * 100)) for depth, ratio in config.schedule)
            ships = {k: getattr(config, k) for k in knobs}
            gate_unquoted = config.min_prompt != UNGATED and "min_prompt" not in knobs
            unquoted = (config.mass and "mass" not in knobs) or gate_unquoted
            if shipped != steps or ships != knobs or unquoted:
                wrong.append(
                    f"{path.name}:{number}: {model or 'built-in'} `{preset}` quoted as {steps} "
                    f"{knobs}, ships {shipped} {ships or config.mass} from{config.min_prompt}"
                )
    assert not wrong, "\n".join(wrong)
    assert seen >= 8  # the convention is in use: README's table, usage.md's presets


def test_the_quote_convention_reads_the_model_and_preset():
    text = (
        "Gemma 3 shipped `gentle`, its default until then, 0.5@24% 0.3@57%; the built-in "
        "`gentle` rule (0.2@67%) and\n\nQwen's `fast` trade) chose 0.5@24% 0.3@57% sparse; its "
        "`default` (`mass0.8 1@24% 1@57% least0.25 dense0.04 from1536`, decode `sparse`)."
    )
    assert quotes(text) == [
        (1, "gemma3-270m", "gentle", ((0.5, 24), (0.3, 57)), {}),
        (1, None, "gentle", ((0.2, 67),), {}),
        (
            3,
            "qwen2.5-coder-0.5b",
            "default",
            ((1.0, 24), (1.0, 57)),
            {"mass": 0.8, "least": 0.25, "dense": 0.04, "min_prompt": 1536},
        ),
    ]


def _defaults(command) -> dict[str, object]:
    """A command's options by each of their names, with their defaults."""
    found = {}
    for name, parameter in inspect.signature(command).parameters.items():
        hints = typing.get_type_hints(command, include_extras=True)[name]
        for info in getattr(hints, "__metadata__", ()):
            if isinstance(info, typer.models.OptionInfo):
                # typer takes a first name given in the default's place as a name too
                for flag in (info.default, *info.param_decls):
                    if isinstance(flag, str) and flag.startswith("-"):
                        found[flag] = parameter.default
    return found


COMMANDS = {
    "chat": chat_command.chat,
    "generate": generate.generate,
    "serve": serve.serve,
    "bench": bench.bench,
    "eval": evaluate.evaluate,
    "calibrate": calibrate_command.calibrate,
    "evaluate": harness.evaluate,
}


def test_the_synopses_show_the_real_defaults():
    """usage.md's synopsis gives an option's default as its value, or as the first of its
    choices (`--output md|json|csv`); an upper-case value is a placeholder."""
    usage = (REPO / "docs" / "usage.md").read_text()
    synopsis = usage[usage.index("```bash") : usage.index("```", usage.index("```bash") + 3)]
    command, checked, wrong = None, 0, []
    for line in synopsis.splitlines():
        words = line.split()
        if words[:1] == ["lazymlx"] and words[1] in COMMANDS:
            command = words[1]
        for flag, value in re.findall(r"\[(--[\w-]+) ([^\]\s]+)", line):
            first = value.split("|")[0]
            if (
                command is None
                or first.upper() == first
                or flag not in _defaults(COMMANDS[command])
            ):
                continue
            default = _defaults(COMMANDS[command])[flag]
            checked += 1
            if str(default) != first:
                wrong.append(
                    f"lazymlx {command} {flag}: the synopsis says {first}, it is {default}"
                )
    assert not wrong, "\n".join(wrong)
    assert checked >= 10


def test_what_usage_says_of_the_registry_models_presets_holds():
    """usage.md says that every registry model's default keeps by attention mass, and that the
    derived presets (sparse, paper, static, random) follow it: change the docs with the
    shipped files."""
    from lazymlx.evals.strategies import STRATEGIES, resolve
    from lazymlx.models.registry import REGISTRY

    usage = " ".join((REPO / "docs" / "usage.md").read_text().split())
    assert "Every registry model's default keeps by attention mass" in usage
    assert "its `sparse`, `paper`, `static` and `random` follow it;" in usage
    for model in REGISTRY:
        default = resolve_preset("default", model)
        assert default.prunes and default.mass, model
        for name in STRATEGIES:
            assert resolve(name, model).schedule == default.schedule, (model, name)
