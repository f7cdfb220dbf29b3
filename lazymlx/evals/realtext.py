"""Real English prose that ships with Python itself: the haystacks of the real-text tasks.

Generated prose (prose.py) is easy to rank: a needle stands out from a small grammar's sentences.
Real text is what users paste, and every Python install carries some: the language reference's
topics (`pydoc_data.topics`, what `help('if')` prints) and the standard library's docstrings.
Paragraphs are kept when they read as prose (long, nearly all letters, no code or doctest), so a
number hidden among them is the only number there more often than not; make_case checks it is.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import warnings

# Modules whose docstrings are long, plain English; all ship with CPython. The texts change a
# little between Python versions, so results name the Python they ran on (bench.header).
DOCSTRING_MODULES = (
    "argparse", "asyncio", "collections", "contextlib", "csv", "dataclasses", "datetime",
    "decimal", "difflib", "email", "enum", "fractions", "functools", "heapq", "http.client",
    "inspect", "itertools", "json", "logging", "mailbox", "os", "pathlib", "pickle", "queue",
    "random", "shutil", "socket", "sqlite3", "statistics", "string", "subprocess", "tarfile",
    "textwrap", "threading", "unittest", "urllib.request", "uuid", "warnings", "zipfile",
)  # fmt: skip


def split_sentences(paragraphs: tuple[str, ...]) -> tuple[str, ...]:
    """The paragraphs' sentences in order: haystack units fine enough to size a prompt closely."""
    return tuple(s for p in paragraphs for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", p))


def _prose(text: str, min_chars: int) -> list[str]:
    """The paragraphs of `text` that read as prose, each on one line."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        paragraph = " ".join(block.split())
        letters = sum(c.isalpha() or c == " " for c in paragraph)
        if (
            len(paragraph) >= min_chars
            and letters / len(paragraph) > 0.9
            and not paragraph.startswith("*")
            and "::" not in paragraph
            and ">>>" not in paragraph
        ):
            paragraphs.append(paragraph)
    return paragraphs


@functools.cache
def reference_paragraphs() -> tuple[str, ...]:
    """Prose paragraphs of the Python language reference (about 40k tokens)."""
    from pydoc_data.topics import topics

    return tuple(p for name in sorted(topics) for p in _prose(topics[name], 200))


@functools.cache
def docstring_paragraphs() -> tuple[str, ...]:
    """Prose paragraphs of standard-library docstrings (about 20k tokens)."""
    paragraphs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in DOCSTRING_MODULES:
            module = importlib.import_module(name)
            docs = [module.__doc__ or ""]
            for attr, value in sorted(vars(module).items()):
                documented = inspect.isfunction(value) or inspect.isclass(value)
                own = getattr(value, "__module__", None) == module.__name__
                if documented and own and not attr.startswith("_"):
                    docs.append(value.__doc__ or "")
            paragraphs += [p for doc in docs for p in _prose(doc, 150)]
    return tuple(paragraphs)
