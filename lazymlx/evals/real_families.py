"""Families whose gold answers real documents state: nothing is planted, the text is the answer.

What people paste is a manual, a source file or several documents and a question about them; the
answer is in the text as its authors wrote it: an option's flags (a manual page's `.TP` entries),
a constant's value or a function's name (the standard library's own source), a module's
docstring. Each question names what it asks in words found once in the haystack, so the gold is
unambiguous, and comes from the split's own documents (lazymlx/evals/sources.py).

`ask` cases go through the chat template, as a user's question does; a base model (no template)
gets the same question as a raw prompt ending with "Answer:". A chat about a document asks one
option, then another.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from lazymlx.errors import LazymlxError
from lazymlx.evals.draft import OPEN_TOKENS, Draft, TextRanOut, Units, raw_frame
from lazymlx.evals.sources import (
    document_paragraphs,
    documented_functions,
    documents,
    haystack,
    manual,
    module_constants,
    module_docstring,
    split_of,
)

# codecs generated from a mapping table: one docstring for dozens of files, not a summary
GENERATED_MODULES = ("encodings/",)
ANSWER_TOKENS = 16  # a chat answer may wrap the flag or name in a few words
OPTION_QUESTION = 'Which option of {command} does this: "{said}"? Answer with the option only.'

Option = tuple[tuple[str, ...], str]  # an option's flags and the first sentence of what it does
# options most pages share, answered from habit rather than from the page
HABITUAL = frozenset({"--help", "--version"})


def _words(text: str) -> list[str]:
    return text.split()


def _option_page(
    rng: random.Random, split: str, least: int = 1, habitual: bool = True
) -> tuple[str, tuple[str, ...], list[Option]]:
    """A manual page of the split with at least `least` options that can be asked: (its name, its
    lines, those options). Options whose long name begins another's on the page are not asked
    (an answer naming the longer one would hold the shorter), nor, unless `habitual`, --help
    and --version."""
    pages = [d for d in documents("man") if split_of(d) == split]
    rng.shuffle(pages)
    for page in pages:
        lines, options = manual(page)
        names = [flag for flags, _ in options for flag in flags]
        usable = [
            (flags, said)
            for flags, said in options
            if (long := [f for f in flags if f.startswith("--")])
            and 5 <= len(_words(said)) <= 24
            and said[-1:].isalnum()
            and not any(n != long[0] and n.startswith(long[0] + "-") for n in names)
            and sum(said == other for _, other in options) == 1
            and (habitual or not HABITUAL & set(flags))
        ]
        if len(options) >= 4 and len(usable) >= least:
            return page, lines, usable
    raise LazymlxError(f"no manual page with options for the {split} split on this machine")


def _long_flag(flags: tuple[str, ...]) -> str:
    return next(f for f in flags if f.startswith("--"))


def _command(page: str) -> str:
    return page.split("/")[-1].split(".")[0]


def _option_line(lines: tuple[str, ...], gold: str, said: str) -> int:
    """The line where the page documents the option: its tag, else its sentence."""
    tags = [i for i, line in enumerate(lines) if gold in line and line.lstrip().startswith("-")]
    return tags[0] if tags else next(i for i, line in enumerate(lines) if said in line)


def _around(lines: tuple[str, ...], at: int, others: Units) -> Units:
    """A document's lines around line `at`, then other documents' units, to the count asked."""

    def units(n: int) -> list[str]:
        if n <= len(lines):
            start = max(0, min(at - n // 2, len(lines) - n))
            return list(lines[start : start + n])
        return list(lines) + ["", *others(n - len(lines) - 1)]

    return units


def _ask(head: str, question: str) -> Callable[[str], tuple[str, ...]]:
    """One message: a head, the haystack's text, then the question after a blank line."""
    return lambda text: (f"{head}{text}\n\n{question}",)


def option(rng: random.Random, seed: int, split: str) -> Draft:
    """A real manual page (then others, to the length), asked which option does what one of its
    options is documented to do: the option's flags are the gold (its long name, or its short
    one), written by the page's authors. A raw prompt leading into the answer."""
    page, lines, usable = _option_page(rng, split)
    flags, said = rng.choice(usable)
    gold = _long_flag(flags)
    command = _command(page)
    others = haystack("man", split, rng.randrange(2**32))
    at = _option_line(lines, gold, said)
    return Draft(
        units=_around(lines, at, others),
        inserts=[],
        frame=raw_frame(
            f"The manual page of {command} follows.\n\n",
            f'\n\nQuestion: which option of {command} does this: "{said}"?\nAnswer: the option is',
        ),
        gold=gold,
        max_tokens=12,
        depth=at / max(len(lines) - 1, 1),
        source="man",
        joiner="\n",
        once=(said,),
        aliases=tuple(flag for flag in flags if flag != gold),
    )


def real_option(rng: random.Random, seed: int, split: str) -> Draft:
    """The option question as a user asks it: the page pasted, the question after it."""
    page, lines, usable = _option_page(rng, split, habitual=False)
    flags, said = rng.choice(usable)
    gold, command = _long_flag(flags), _command(page)
    others = haystack("man", split, rng.randrange(2**32))
    at = _option_line(lines, gold, said)
    return Draft(
        units=_around(lines, at, others),
        inserts=[],
        frame=_ask(
            f"The manual page of {command} follows.\n\n",
            OPTION_QUESTION.format(command=command, said=said),
        ),
        gold=gold,
        max_tokens=ANSWER_TOKENS,
        depth=at / max(len(lines) - 1, 1),
        source="man",
        joiner="\n",
        kind="ask",
        once=(said,),
        aliases=tuple(flag for flag in flags if flag != gold),
    )


def _shares(sizes: list[int], n: int) -> list[int]:
    """n lines shared among documents of `sizes` lines as evenly as they allow (water filling)."""
    shares, left = [0] * len(sizes), n
    open_ = [i for i, size in enumerate(sizes) if size]
    while left and open_:
        each = max(1, left // len(open_))
        for i in list(open_):
            take = min(each, sizes[i] - shares[i], left)
            shares[i] += take
            left -= take
            if shares[i] == sizes[i]:
                open_.remove(i)
            if not left:
                break
    return shares


def pick(rng: random.Random, seed: int, split: str) -> Draft:
    """3-8 real manual pages, as a retriever hands them over, and one option of one of them asked
    without naming its page: the pages share the length evenly, the asked one at a drawn place
    (its lines around the option)."""
    page, lines, usable = _option_page(rng, split, habitual=False)
    flags, said = rng.choice(usable)
    gold = _long_flag(flags)
    count = rng.randint(3, 8)
    others = [d for d in documents("man") if split_of(d) == split and d != page]
    pages = rng.sample(others, count - 1)
    asked = rng.randrange(count)
    pages.insert(asked, page)
    texts = [lines if p == page else manual(p)[0] for p in pages]
    at = _option_line(lines, gold, said)

    def units(n: int) -> list[str]:
        if n > sum(len(text) for text in texts):
            raise TextRanOut(page)
        out: list[str] = []
        for i, (name, text, share) in enumerate(
            zip(pages, texts, _shares([len(t) for t in texts], n), strict=True)
        ):
            start = max(0, min(at - share // 2, len(text) - share)) if name == page else 0
            out += [f"Document {i + 1}: the manual page of {_command(name)}", ""]
            out += [*text[start : start + share], ""]
        return out

    return Draft(
        units=units,
        inserts=[],
        frame=_ask(
            "",
            f'One of the manual pages above has an option that does this: "{said}". Which option '
            "is it? Answer with the option only.",
        ),
        gold=gold,
        max_tokens=ANSWER_TOKENS,
        depth=(asked + 0.5) / count,
        source="man",
        joiner="\n",
        kind="ask",
        once=(said,),
        aliases=tuple(flag for flag in flags if flag != gold),
    )


def _code_module(
    rng: random.Random, split: str, facts: Callable[[str], tuple]
) -> tuple[str, tuple]:
    """A standard-library file of the split with at least one fact `facts` finds in it."""
    modules = [d for d in documents("code") if split_of(d) == split]
    rng.shuffle(modules)
    for module in modules:
        found = facts(module)
        if found:
            return module, found
    raise LazymlxError(f"no standard-library source for the {split} split on this machine")


def value(rng: random.Random, seed: int, split: str) -> Draft:
    """Real source (a standard-library file around one of its module constants, then other
    files), asked the number a constant is set to, as written there."""
    module, constants = _code_module(rng, split, module_constants)
    name, literal, at = rng.choice(constants)
    lines = document_paragraphs("code", module)
    others = haystack("code", split, rng.randrange(2**32))
    number = str(int(literal.replace("_", ""), 0))
    return Draft(
        units=_around(lines, at, others),
        inserts=[],
        frame=_ask(
            "", f"In the Python source above, what is {name} set to? Answer with the value only."
        ),
        gold=literal,
        max_tokens=ANSWER_TOKENS,
        depth=at / max(len(lines) - 1, 1),
        source="code",
        joiner="\n",
        kind="ask",
        once=(f"{name} = ",),
        aliases=(number,) if number != literal else (),
    )


def function(rng: random.Random, seed: int, split: str) -> Draft:
    """Real source (a standard-library file around one of its documented functions, then other
    files), asked which function its docstring's first sentence describes."""
    module, functions = _code_module(rng, split, documented_functions)
    name, said, at = rng.choice(functions)
    lines = document_paragraphs("code", module)
    others = haystack("code", split, rng.randrange(2**32))
    return Draft(
        units=_around(lines, at, others),
        inserts=[],
        frame=_ask(
            "",
            f'Which function in the Python source above does this: "{said}"? Answer with the '
            "function's name only.",
        ),
        gold=name,
        max_tokens=ANSWER_TOKENS,
        depth=at / max(len(lines) - 1, 1),
        source="code",
        joiner="\n",
        kind="ask",
        once=(said, f"def {name}("),
    )


def chat(rng: random.Random, seed: int, split: str) -> Draft:
    """A chat about a real manual page: which option does one thing, then which does another
    (the scored answer), the page around the second."""
    page, lines, usable = _option_page(rng, split, least=2, habitual=False)
    (first_flags, first_said), (flags, said) = rng.sample(usable, 2)
    gold, command = _long_flag(flags), _command(page)
    others = haystack("man", split, rng.randrange(2**32))
    at = _option_line(lines, gold, said)
    return Draft(
        units=_around(lines, at, others),
        inserts=[],
        frame=lambda text: (
            f"The manual page of {command} follows.\n\n{text}\n\n"
            + OPTION_QUESTION.format(command=command, said=first_said),
            OPTION_QUESTION.format(command=command, said=said),
        ),
        gold=gold,
        max_tokens=ANSWER_TOKENS,
        depth=at / max(len(lines) - 1, 1),
        source="man",
        joiner="\n",
        kind="chat",
        once=(said,),
        aliases=tuple(flag for flag in flags if flag != gold),
    )


def docstring(rng: random.Random, seed: int, split: str) -> Draft:
    """A standard-library module's source with its docstring taken out, then asked for the
    docstring: the answer is scored against what the module's authors wrote (the first
    paragraph, by ROUGE-L, as LongBench scores summaries) and by the full model's judgment."""
    modules = [
        d
        for d in documents("code")
        if split_of(d) == split
        and not d.startswith(GENERATED_MODULES)
        and len(_words(module_docstring(d)[0])) >= 8
    ]
    module = rng.choice(modules)
    summary, lines = module_docstring(module)

    def units(n: int) -> list[str]:
        """The module's first n lines, cut back to the last blank line (so the text seldom ends
        inside a string or a statement)."""
        if n > len(lines):
            raise TextRanOut(module)
        cut = next((i for i in range(n, 0, -1) if not lines[i - 1].strip()), n)
        return list(lines[:cut])

    return Draft(
        units=units,
        inserts=[],
        frame=lambda text: (
            f'{text}\n\n# The module\'s docstring, which belongs at its top:\n"""',
        ),
        gold=None,
        max_tokens=OPEN_TOKENS,
        depth=1.0,
        source="code",
        joiner="\n",
        judge="doc",
        reference=summary,
    )


# The questions people paste with a document, by family name: a manual's option asked in a chat
# turn, one of several documents (retrieval's hand-over), a constant's value and a function's
# name in source code, a second question in a chat about a page.
REAL_QUESTIONS = {
    "real-option": real_option,
    "real-pick": pick,
    "real-value": value,
    "real-function": function,
    "real-chat": chat,
}
