"""The eval's task families: each drafts a case from (split, seed), to be sized by cases.py.

A family is a function of (rng, seed, split) returning a `Draft`: a haystack of units (filler,
real prose, source or manual lines) with pieces planted at depths, framed into the segments a
case feeds the model. Families fall into three groups by how their answers are scored:
- exact (the rest): a gold answer, right or wrong whole (a planted number, an option's flag);
- open-ended (OPEN, the CLI's group `open`): a summary, a question about a document, a second
  turn, a line of code, a docstring, scored against a gold text where their source has one a
  person wrote (the file's own next line, the module's own docstring) and by the full model's
  judgment (lazymlx/evals/judge.py); their words against stock's are a diagnostic;
- unscored (UNSCORED, the `freeform-*` families and the CLI's group `freeform`): no gold and no
  judge, only how many of their first 32 greedy tokens agree with keep-all's.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

from lazymlx.evals import real_families
from lazymlx.evals.draft import OPEN_TOKENS, Draft, Units, raw_frame
from lazymlx.evals.sources import PROSE_SOURCES, haystack
from lazymlx.prompts import FILLER

DEPTHS = (0.1, 0.3, 0.5, 0.7, 0.9)
UNSCORED_TOKENS = 32  # unscored cases: tokens compared with keep-all's
# How an open answer is compared with a text (stock's, as a diagnostic, or the gold one): "text"
# ROUGE-L; "line" the first line's edit similarity (LongBench's LCC); "doc" ROUGE-L of what comes
# before a docstring's closing quotes.
JUDGES = ("text", "line", "doc")

CITIES = (
    "Lisbon", "Oslo", "Quito", "Hanoi", "Tunis", "Lima", "Accra", "Perth", "Dakar", "Riga",
    "Sofia", "Cusco", "Bergen", "Porto", "Kyoto", "Malmo",
)  # fmt: skip
COLORS = (
    "red", "green", "blue", "yellow", "white", "black", "orange", "purple", "silver", "brown",
    "grey", "golden",
)  # fmt: skip
PEOPLE = (
    "Ada", "Bruno", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Iris", "Jonas",
    "Kenji", "Lina", "Marta", "Nadia", "Omar", "Pia", "Rafael", "Sara", "Theo", "Yara",
)  # fmt: skip
SERVICES = (
    "billing", "search", "mailer", "gateway", "ledger", "scheduler", "uploader", "auth",
    "metrics", "reports", "cache", "indexer",
)  # fmt: skip
TEAMS = ("Apollo", "Borealis", "Cobalt", "Delta", "Ember", "Falcon", "Granite", "Harbor")
CONSTANTS = (
    "MAX_RETRY_DELAY", "DEFAULT_PORT", "BUFFER_LIMIT", "CACHE_SIZE", "MAX_WORKERS",
    "SESSION_TIMEOUT", "BATCH_SIZE", "QUEUE_DEPTH",
)  # fmt: skip
# The passkey task as Landmark Attention and LongLoRA wrote it (the format LazyLLM-era papers use).
PASSKEY_HEAD = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize "
    "them. I will quiz you about the important information there. "
)
NOISE = FILLER.strip()


@dataclass(frozen=True)
class Fact:
    """One kind of fact: how it is stated, asked, and answered (the lead the answer follows)."""

    statement: str
    question: str
    lead: str
    keys: tuple[str, ...]

    def state(self, key: str, value: str) -> str:
        return self.statement.format(key=key, value=value)

    def ask(self, key: str) -> str:
        return f"{self.question.format(key=key)} {self.lead.format(key=key)}"


FACTS = (
    Fact(
        "The special magic number for {key} is {value}.",
        "What is the special magic number for {key}?",
        "The special magic number for {key} is",
        CITIES,
    ),
    Fact(
        "The access code for the {key} door is {value}.",
        "What is the access code for the {key} door?",
        "The access code for the {key} door is",
        COLORS,
    ),
    Fact(
        "{key}'s pass key is {value}. Remember it.",
        "What is {key}'s pass key?",
        "{key}'s pass key is",
        PEOPLE,
    ),
)


def _number(rng: random.Random, digits: int) -> str:
    return str(rng.randrange(10 ** (digits - 1), 10**digits))


def _numbers(rng: random.Random, count: int, digits: tuple[int, ...] = (5, 6, 7)) -> list[str]:
    """Distinct numbers, none inside another (so each is scored whole and unambiguously)."""
    numbers: list[str] = []
    while len(numbers) < count:
        number = _number(rng, rng.choice(digits))
        if all(number not in other and other not in number for other in numbers):
            numbers.append(number)
    return numbers


def _spread(rng: random.Random, count: int, avoid: float) -> list[float]:
    """Depths for distractors, kept a little away from the asked fact's."""
    depths: list[float] = []
    while len(depths) < count:
        depth = rng.uniform(0.03, 0.97)
        if abs(depth - avoid) > 0.04:
            depths.append(depth)
    return depths


def _prose(seed: int, split: str, rng: random.Random) -> tuple[Units, str]:
    """A prose haystack: the source cycles with the seed, the document order is drawn."""
    source = PROSE_SOURCES[seed % len(PROSE_SOURCES)]
    return haystack(source, split, rng.randrange(2**32)), source


def _noise(n: int) -> list[str]:
    return [NOISE] * n


# --- the families -------------------------------------------------------------------------


def passkey(rng: random.Random, seed: int, split: str) -> Draft:
    key = _numbers(rng, 1, (5, 6))[0]
    depth = DEPTHS[seed % len(DEPTHS)]
    return Draft(
        units=_noise,
        inserts=[(depth, f"The pass key is {key}. Remember it. {key} is the pass key.")],
        frame=raw_frame(PASSKEY_HEAD, " What is the pass key? The pass key is"),
        gold=key,
        max_tokens=8,
        depth=depth,
        source="filler",
        values=[key],
    )


def _needle(source: str) -> Callable[[random.Random, int, str], Draft]:
    def needle(rng: random.Random, seed: int, split: str) -> Draft:
        fact = FACTS[seed % len(FACTS)]
        key, value = rng.choice(fact.keys), _numbers(rng, 1)[0]
        depth = DEPTHS[seed % len(DEPTHS)]
        return Draft(
            units=haystack(source, split, rng.randrange(2**32)),
            inserts=[(depth, fact.state(key, value))],
            frame=raw_frame(
                "A fact is hidden in the text below. Find it and remember it.\n\n",
                f"\n\n{fact.ask(key)}",
            ),
            gold=value,
            max_tokens=10,
            depth=depth,
            source=source,
            values=[value],
        )

    return needle


def lookalike(rng: random.Random, seed: int, split: str) -> Draft:
    """3-8 facts of one form with different keys; one is asked."""
    fact = FACTS[rng.randrange(len(FACTS))]
    count = rng.randint(3, 8)
    keys, values = rng.sample(fact.keys, count), _numbers(rng, count)
    depth = DEPTHS[seed % len(DEPTHS)]
    depths = [depth, *_spread(rng, count - 1, depth)]
    units, source = _prose(seed, split, rng)
    return Draft(
        units=units,
        inserts=[(d, fact.state(k, v)) for d, k, v in zip(depths, keys, values, strict=True)],
        frame=raw_frame(
            "The text below hides several facts of the same kind. Read it carefully.\n\n",
            f"\n\n{fact.ask(keys[0])}",
        ),
        gold=values[0],
        max_tokens=10,
        depth=depth,
        source=source,
        values=values,
    )


HOPS = (
    ("{owner}'s room number is {value}.", "{who} sleeps in {owner}'s room.", "room", "sleep"),
    ("{owner}'s garage number is {value}.", "{who} parks in {owner}'s garage.", "garage", "park"),
)


def twohop(rng: random.Random, seed: int, split: str) -> Draft:
    """One fact names the key of another: whose room, then that room's number. In filler, as
    RULER hides its chains. SmolLM2-135M names the right room nearly always but rarely goes on
    to its number, so few of these cases count (only baseline-right ones do)."""
    owned, link, thing, verb = HOPS[rng.randrange(len(HOPS))]
    people = rng.sample(PEOPLE, rng.randint(4, 6))
    who, owners = people[0], people[1:]
    values = _numbers(rng, len(owners), (4, 5))
    depth = DEPTHS[seed % len(DEPTHS)]
    facts = [(d, owned.format(owner=o, value=v)) for d, o, v in zip(
        _spread(rng, len(owners), depth), owners, values, strict=True
    )]  # fmt: skip
    verb_s = "sleeps" if verb == "sleep" else "parks"
    return Draft(
        units=_noise,
        inserts=[(depth, link.format(who=who, owner=owners[0])), *facts],
        frame=raw_frame(
            "Read the text below carefully. ",
            f" Question: in whose {thing} does {who} {verb}, and what is its number? "
            f"Answer: {who} {verb_s} in",
        ),
        gold=values[0],
        max_tokens=24,
        depth=depth,
        source="filler",
        values=values,
    )


def json_lookup(rng: random.Random, seed: int, split: str) -> Draft:
    """A JSON block of 3-8 records in a document; one record's field is asked."""
    names = rng.sample(SERVICES, rng.randint(3, 8))
    ports = _numbers(rng, len(names), (4, 5))
    block = "\n".join(
        ['{"services": ['] + [
            f"  {json.dumps({'name': n, 'port': int(p)})}{',' if i < len(names) - 1 else ''}"
            for i, (n, p) in enumerate(zip(names, ports, strict=True))
        ] + ["]}"]
    )  # fmt: skip
    asked = rng.randrange(len(names))
    frame = raw_frame(
        "The text below holds a service list in JSON.\n\n",
        f'\n\nQuestion: what is the port of the "{names[asked]}" service in the JSON above?\n'
        f'Answer: {{"name": "{names[asked]}", "port":',
    )
    return _lookup(rng, seed, split, block, frame, ports, asked, max_tokens=8)


def table_lookup(rng: random.Random, seed: int, split: str) -> Draft:
    """A markdown table of 3-8 rows in a document; one row's cell is asked."""
    people = rng.sample(PEOPLE, rng.randint(3, 8))
    extensions = _numbers(rng, len(people), (4, 5))
    rows = [f"| {p} | {rng.choice(TEAMS)} | {e} |" for p, e in zip(people, extensions, strict=True)]
    block = "\n".join(["| name | team | extension |", "|---|---|---|", *rows])
    asked = rng.randrange(len(people))
    frame = raw_frame(
        "The text below holds a phone list as a table.\n\n",
        f"\n\nQuestion: what is {people[asked]}'s extension in the table above?\n"
        f"Answer: | {people[asked]} |",
    )
    return _lookup(rng, seed, split, block, frame, extensions, asked, max_tokens=12)


def _lookup(
    rng: random.Random,
    seed: int,
    split: str,
    block: str,
    frame: Callable[[str], tuple[str, ...]],
    values: list[str],
    asked: int,
    max_tokens: int,
) -> Draft:
    """A lookup case: `block` (records holding `values`) set in prose at the seed's depth, the
    frame asking for values[asked]."""
    depth = DEPTHS[seed % len(DEPTHS)]
    units, source = _prose(seed, split, rng)
    return Draft(
        units=units,
        inserts=[(depth, f"\n\n{block}\n\n")],
        frame=frame,
        gold=values[asked],
        max_tokens=max_tokens,
        depth=depth,
        source=source,
        values=values,
    )


def _variable(rng: random.Random, taken: list[str]) -> str:
    while True:
        name = "".join(rng.choices(string.ascii_uppercase, k=5))
        if name not in taken:
            return name


def vartrack(rng: random.Random, seed: int, split: str) -> Draft:
    """A variable assigned 2-3 times among 1-2 other variables' assignments; its last value asked
    (RULER's variable tracking as a chain of overwrites). SmolLM2-135M often copies an earlier
    value, so few of these cases count."""
    names: list[str] = []
    for _ in range(rng.randint(2, 3)):
        names.append(_variable(rng, names))
    times = [rng.randint(2, 3)] + [1 for _ in names[1:]]
    values = _numbers(rng, sum(times), (4, 5))
    last = 0.2 + 0.75 * DEPTHS[seed % len(DEPTHS)]
    asked = sorted(rng.uniform(0.02, last - 0.04) for _ in range(times[0] - 1)) + [last]
    inserts = [
        (d, f"VAR {names[0]} = {v}.") for d, v in zip(asked, values[: times[0]], strict=True)
    ]
    rest = iter(values[times[0] :])
    for name, count in zip(names[1:], times[1:], strict=True):
        inserts += [(d, f"VAR {name} = {next(rest)}.") for d in _spread(rng, count, last)]
    return Draft(
        units=_noise,
        inserts=inserts,
        frame=raw_frame(
            "Track the variable assignments hidden in this text; a later assignment replaces an "
            "earlier one. ",
            f" Question: what number does VAR {names[0]} hold at the end of the text? "
            f"Answer: VAR {names[0]} =",
        ),
        gold=values[times[0] - 1],
        max_tokens=8,
        depth=last,
        source="filler",
        values=values,
    )


def _top_level(lines: list[str], depth: float) -> int:
    """The top-level line boundary (a blank line before unindented code) nearest to depth."""
    target = round(depth * len(lines))
    spots = [
        i
        for i in range(1, len(lines))
        if not lines[i - 1].strip() and lines[i][:1] not in ("", " ", "\t")
    ]
    return min(spots, key=lambda i: abs(i - target), default=target)


def code(rng: random.Random, seed: int, split: str) -> Draft:
    """A module-level constant added to real standard-library source; its value asked."""
    name, value = rng.choice(CONSTANTS), _numbers(rng, 1, (4, 5, 6))[0]
    depth = DEPTHS[seed % len(DEPTHS)]
    return Draft(
        units=haystack("code", split, rng.randrange(2**32)),
        inserts=[(depth, f"{name} = {value}\n")],
        frame=raw_frame("", f"\n\n# Question: what is the value of {name}?\n# Answer: {name} ="),
        gold=value,
        max_tokens=8,
        depth=depth,
        source="code",
        joiner="\n",
        values=[value],
        place=_top_level,
    )


def _two_facts(rng: random.Random, seed: int, same_kind: bool):
    """Two facts: the one asked last (its depth sweeps with the seed) and another one, of the
    same kind or not, somewhere else. Each is (fact, key, value, depth)."""
    asked = FACTS[seed % len(FACTS)]
    other = asked if same_kind else FACTS[(seed + 1) % len(FACTS)]
    if same_kind:
        key, other_key = rng.sample(asked.keys, 2)
    else:
        key, other_key = rng.choice(asked.keys), rng.choice(other.keys)
    value, other_value = _numbers(rng, 2)
    depth = DEPTHS[seed % len(DEPTHS)]
    return (asked, key, value, depth), (other, other_key, other_value, _spread(rng, 1, depth)[0])


def followup(rng: random.Random, seed: int, split: str) -> Draft:
    """A document asked about one fact, answered, then asked about another in the same context."""
    (fact, key, value, depth), (first, key_a, value_a, other) = _two_facts(rng, seed, True)
    units, source = _prose(seed, split, rng)
    return Draft(
        units=units,
        inserts=[(depth, fact.state(key, value)), (other, first.state(key_a, value_a))],
        frame=lambda text: (
            f"Two facts are hidden in the text below.\n\n{text}\n\n{first.ask(key_a)}",
            f"\n\n{fact.ask(key)}",
        ),
        gold=value,
        max_tokens=10,
        depth=depth,
        source=source,
        kind="followup",
        values=[value, value_a],
    )


def kept(rng: random.Random, seed: int, split: str) -> Draft:
    """A document computed and kept on its own (a file, or LLM's prefix reuse), asked later."""
    (fact, key, value, depth), (other_fact, key_a, value_a, other) = _two_facts(rng, seed, False)
    units, source = _prose(seed, split, rng)
    return Draft(
        units=units,
        inserts=[(depth, fact.state(key, value)), (other, other_fact.state(key_a, value_a))],
        frame=lambda text: (f"Read the documentation below.\n\n{text}\n\n", fact.ask(key)),
        gold=value,
        max_tokens=10,
        depth=depth,
        source=source,
        kind="kept-file" if seed % 2 == 0 else "kept-llm",
        values=[value, value_a],
    )


def chat(rng: random.Random, seed: int, split: str) -> Draft:
    """A chat about a document (chat template), the follow-up about another part of it."""
    (fact, key, value, depth), (_, key_a, value_a, other) = _two_facts(rng, seed, True)
    units, source = _prose(seed, split, rng)
    return Draft(
        units=units,
        inserts=[(depth, fact.state(key, value)), (other, fact.state(key_a, value_a))],
        frame=lambda text: (
            f"Read this document.\n\n{text}\n\n{fact.question.format(key=key_a)}",
            fact.question.format(key=key),
        ),
        gold=value,
        max_tokens=24,
        depth=depth,
        source=source,
        kind="chat",
        values=[value, value_a],
    )


def freeform_text(rng: random.Random, seed: int, split: str) -> Draft:
    """Real text to continue: the first tokens compared with keep-all's."""
    units, source = _prose(seed, split, rng)
    return Draft(units, [], lambda text: (text,), None, UNSCORED_TOKENS, 1.0, source)


def freeform_chat(rng: random.Random, seed: int, split: str) -> Draft:
    """A chat answer about a document: the first tokens compared with keep-all's."""
    units, source = _prose(seed, split, rng)
    return Draft(
        units,
        [],
        lambda text: (f"{text}\n\nSummarize the text above in two sentences.",),
        None,
        UNSCORED_TOKENS,
        1.0,
        source,
        kind="chat",
    )


# --- open-ended families: what people ask of a pasted document --------------------------------

# Questions with no single right answer, asked of whatever document the case holds.
QUESTIONS = (
    "What is the text above about, and what should a reader remember from it?",
    "Which commands, options or functions does the text above mention, and what is each for?",
    "What problem does the text above address, and how?",
    "Explain the text above to a colleague who has not read it.",
)
SECOND_QUESTIONS = (
    "Which detail in it would a new user most likely get wrong?",
    "Now give one concrete example of how to use what it describes.",
    "What does it leave unsaid that a reader would need to know?",
)


def _document_task(ask: Callable[[random.Random], tuple[str, ...]]) -> Callable[..., Draft]:
    """A chat about a real document: its first message the document and a request, any later
    ones follow-ups; the last reply judged against stock's."""

    def family(rng: random.Random, seed: int, split: str) -> Draft:
        units, source = _prose(seed, split, rng)
        asked = ask(rng)
        return Draft(
            units,
            [],
            lambda text: (f"{text}\n\n{asked[0]}", *asked[1:]),
            None,
            OPEN_TOKENS,
            1.0,
            source,
            kind="chat",
            judge="text",
        )

    return family


summary = _document_task(lambda rng: ("Summarize the text above in three short bullet points.",))
question = _document_task(lambda rng: (rng.choice(QUESTIONS),))
second_turn = _document_task(lambda rng: (rng.choice(QUESTIONS), rng.choice(SECOND_QUESTIONS)))


def completion(rng: random.Random, seed: int, split: str) -> Draft:
    """Real source, cut after a line: the next line written (LongBench's LCC), judged against
    stock's line, the file's own line beside it."""
    return Draft(
        units=haystack("code", split, rng.randrange(2**32)),
        inserts=[],
        frame=lambda text: (text + "\n",),
        gold=None,
        max_tokens=OPEN_TOKENS,
        depth=1.0,
        source="code",
        joiner="\n",
        judge="line",
        next_line=True,
    )


FAMILIES: dict[str, Callable[[random.Random, int, str], Draft]] = {
    "passkey": passkey,
    "lookalike": lookalike,
    "twohop": twohop,
    "needle-docs": _needle("python-docs"),
    "needle-man": _needle("man"),
    "needle-pkgdoc": _needle("pkgdoc"),
    "json": json_lookup,
    "table": table_lookup,
    "vartrack": vartrack,
    "code": code,
    "followup": followup,
    "kept": kept,
    "chat": chat,
    "freeform-text": freeform_text,
    "freeform-chat": freeform_chat,
    "summary": summary,
    "question": question,
    "second-turn": second_turn,
    "completion": completion,
    "option": real_families.option,
    "docstring": real_families.docstring,
    **real_families.REAL_QUESTIONS,
}
OPEN = ("summary", "question", "second-turn", "completion", "docstring")
UNSCORED = ("freeform-text", "freeform-chat")
# the groups --families takes by name: `scored` is the exact and open-ended families together
GROUPS = {
    "all": list(FAMILIES),
    "scored": [name for name in FAMILIES if name not in UNSCORED],
    "freeform": list(UNSCORED),
    "open": list(OPEN),
    # questions whose answers real documents state (real_families.py)
    "real": ["option", *real_families.REAL_QUESTIONS],
}
# through the chat template: none for a base model (the `real-` questions but a chat reach one as
# raw prompts)
CHAT_FAMILIES = ("chat", "freeform-chat", "summary", "question", "second-turn", "real-chat")
# more than one prompt step: a second question, a kept document, a chat's later turn
MULTI_STEP = ("followup", "kept", "chat", "second-turn", "real-chat")
# One prompt each (raw, or one chat message): what `lazymlx bench` can time.
SINGLE_PROMPT = tuple(name for name in FAMILIES if name not in MULTI_STEP)
