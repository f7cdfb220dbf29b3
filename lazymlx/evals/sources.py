"""Real text already on the machine: the haystacks of the eval, split by document.

Four unrelated sources, none fetched at run time:
- python-docs: Python's language reference (`pydoc_data.topics`, what `help('if')` prints) and
  standard-library docstrings; they ship with every Python;
- man: the English manual pages under /usr/share/man, their roff markup stripped;
- pkgdoc: package documentation under /usr/share/doc (README, NEWS, FAQ files);
- code: the standard library's own Python source (lines, not sentences).

Every document belongs to one split, by a hash of its name, so calibration cases and validation
cases never share a page of text: a rule tuned on one split meets unseen documents in the other.
Two sources also give gold answers a person wrote: a manual page's options (each flag and what
it does) and a module's docstring (what its source does).

Some texts on the machine are held out of every source (HELD_OUT): Git's release notes, the GPL
and the GNU info manuals are where the project checks itself on text no knob was tuned to.
Prose paragraphs are kept when they read as prose (long, nearly all letters, no code), so a
number hidden among them is usually the only number there; the case generator checks it is.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib
import inspect
import random
import re
import sysconfig
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from lazymlx.errors import LazymlxError

SPLITS = ("calibration", "validation")
PROSE_SOURCES = ("python-docs", "man", "pkgdoc")
MAN_DIR = Path("/usr/share/man")
DOC_DIR = Path("/usr/share/doc")
# read by no source: checks of the project's own, on text the eval never tunes to
HELD_OUT = ("/usr/share/info", "/usr/share/doc/git/RelNotes", "/usr/share/common-licenses")
# the Cloud SDK's 16,000 generated pages would make most man haystacks one product's reference
GENERATED_MAN_PAGES = ("gcloud",)
# package documentation worth reading as prose (changelogs and copyright files are lists and
# repeated licence text)
DOC_FILES = re.compile(r"^(README|NEWS|FAQ|HISTORY|INTRO|CHANGES)([.-].*)?$", re.IGNORECASE)
# Modules whose docstrings are long, plain English; all ship with CPython. The texts change a
# little between Python versions, so results name the Python they ran on (bench.header).
DOCSTRING_MODULES = (
    "argparse", "ast", "asyncio", "bdb", "calendar", "cmd", "codecs", "collections",
    "concurrent.futures", "configparser", "contextlib", "copy", "csv", "dataclasses", "datetime",
    "decimal", "difflib", "doctest", "email", "enum", "filecmp", "fractions", "ftplib",
    "functools", "gettext", "glob", "heapq", "hmac", "html.parser", "http.client",
    "http.cookies", "imaplib", "inspect", "ipaddress", "itertools", "json", "locale", "logging",
    "mailbox", "multiprocessing", "netrc", "numbers", "optparse", "os", "pathlib", "pdb",
    "pickle", "pkgutil", "plistlib", "poplib", "pprint", "queue", "random", "reprlib", "sched",
    "selectors", "shelve", "shlex", "shutil", "smtplib", "socket", "socketserver", "sqlite3",
    "ssl", "statistics", "string", "subprocess", "tarfile", "tempfile", "textwrap", "threading",
    "timeit", "tokenize", "trace", "traceback", "typing", "unittest", "urllib.parse",
    "urllib.request", "uuid", "warnings", "weakref", "xml.dom.minidom", "zipfile",
)  # fmt: skip


def split_of(document: str) -> str:
    """The split a document belongs to, fixed by its name (half of the documents each)."""
    return SPLITS[hashlib.sha256(document.encode()).digest()[0] % 2]


def prose_paragraphs(text: str, min_chars: int = 150) -> list[str]:
    """The paragraphs of `text` that read as prose, each on one line."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        paragraph = " ".join(block.split())
        letters = sum(c.isalpha() or c == " " for c in paragraph)
        if (
            len(paragraph) >= min_chars
            and letters / len(paragraph) > 0.9
            and not paragraph.startswith(("*", "#", "-"))
            and "::" not in paragraph
            and ">>>" not in paragraph
        ):
            paragraphs.append(paragraph)
    return paragraphs


MAX_WORDS = 60  # a "sentence" longer than this (a list, a run-on) is cut into pieces


def split_sentences(paragraphs: list[str]) -> list[str]:
    """The paragraphs' sentences in order: haystack units fine enough to size a prompt closely."""
    units = []
    for paragraph in paragraphs:
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", paragraph):
            words = sentence.split(" ")
            units += [" ".join(words[i : i + MAX_WORDS]) for i in range(0, len(words), MAX_WORDS)]
    return units


# --- the documents of each source ---------------------------------------------------------


@functools.cache
def documents(source: str) -> tuple[str, ...]:
    """Every document name of a source, sorted (the order cases shuffle from)."""
    if source == "python-docs":
        from pydoc_data.topics import topics

        return tuple(sorted(f"topic:{name}" for name in topics)) + tuple(
            f"module:{name}" for name in DOCSTRING_MODULES
        )
    if source == "man":
        pages = sorted(MAN_DIR.glob("man[1-8]/*"))
        return tuple(
            str(page.relative_to(MAN_DIR))
            for page in pages
            if page.is_file() and not page.name.startswith(GENERATED_MAN_PAGES)
        )
    if source == "pkgdoc":
        files = sorted(DOC_DIR.glob("*/*"))
        return tuple(
            str(f.relative_to(DOC_DIR)) for f in files if f.is_file() and DOC_FILES.match(f.name)
        )
    if source == "code":
        root = Path(sysconfig.get_paths()["stdlib"])
        skip = {"test", "tests", "idle_test", "site-packages", "lib2to3", "turtledemo"}
        files = sorted(root.rglob("*.py"))
        return tuple(
            str(f.relative_to(root))
            for f in files
            if not skip & set(f.relative_to(root).parts) and f.stat().st_size > 4000
        )
    raise LazymlxError(f"unknown text source {source!r}")


def _read(path: Path) -> str:
    if str(path).startswith(HELD_OUT):
        raise LazymlxError(f"{path} is held out of the eval's sources")
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return data.decode("utf-8", errors="replace")


ROFF_TEXT_MACROS = re.compile(r"^\.(B|I|BR|BI|IB|IR|RB|RI|SM|SB)\s+(.*)$")
ROFF_BREAKS = re.compile(r"^\.(PP|P|LP|SH|SS|TP|IP|HP|sp|br|RS|RE|nf|fi|TH|Sh|Pp)\b")
ROFF_ESCAPES = [
    (re.compile(r"\\f(\(..|\[[^]]*\]|.)"), ""),
    (re.compile(r"\\\((em|en)"), "-"),
    (re.compile(r"\\\((aq|cq)"), "'"),
    (re.compile(r"\\\((lq|rq|dq)"), '"'),
    (re.compile(r"\\\*(\(..|\[[^]]*\]|.)"), ""),
    (re.compile(r"\\\(..|\\\[[^]]*\]"), ""),
    (re.compile(r"\\[-e]"), "-"),
    (re.compile(r"\\[&|^%,/:]"), ""),
    (re.compile(r"\\ "), " "),
]


def strip_roff(source: str) -> str:
    """A manual page's text: its paragraphs, its markup dropped (no groff needed)."""
    lines = []
    for line in source.splitlines():
        if line.startswith((".", "'")):
            text = ROFF_TEXT_MACROS.match(line)
            if text:
                lines.append(text.group(2).replace('"', ""))
            elif ROFF_BREAKS.match(line):
                lines.append("")
            continue
        lines.append(line)
    text = "\n".join(lines)
    for pattern, replacement in ROFF_ESCAPES:
        text = pattern.sub(replacement, text)
    return text


@functools.cache
def document_paragraphs(source: str, document: str) -> tuple[str, ...]:
    """A document's prose paragraphs (or, for code, its lines)."""
    if source == "python-docs":
        kind, name = document.split(":", 1)
        if kind == "topic":
            from pydoc_data.topics import topics

            return tuple(prose_paragraphs(topics[name], 200))
        return tuple(prose_paragraphs(_docstrings(name)))
    if source == "man":
        return tuple(prose_paragraphs(strip_roff(_read(MAN_DIR / document))))
    if source == "pkgdoc":
        return tuple(prose_paragraphs(_read(DOC_DIR / document)))
    if source == "code":
        root = Path(sysconfig.get_paths()["stdlib"])
        return tuple((root / document).read_text(errors="replace").splitlines())
    raise LazymlxError(f"unknown text source {source!r}")


def _docstrings(module_name: str) -> str:
    """A module's docstring and those of its public functions and classes (quietly: importing
    some modules, and looking at typing's deprecated io and re members, warns)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = importlib.import_module(module_name)
        docs = [module.__doc__ or ""]
        for attr, value in sorted(vars(module).items()):
            documented = inspect.isfunction(value) or inspect.isclass(value)
            own = getattr(value, "__module__", None) == module.__name__
            if documented and own and not attr.startswith("_"):
                docs.append(value.__doc__ or "")
    return "\n\n".join(docs)


# --- gold answers a person wrote ----------------------------------------------------------

_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z0-9][\w-]*)")


def _unescape(line: str) -> str:
    for pattern, replacement in ROFF_ESCAPES:
        line = pattern.sub(replacement, line)
    return line.strip()


@functools.cache
def manual(document: str) -> tuple[tuple[str, ...], tuple[tuple[tuple[str, ...], str], ...]]:
    """A manual page as text lines (markup dropped, blank runs collapsed), and its options as
    written in `.TP` entries: each option's flags and the first sentence of what it does."""
    source = _read(MAN_DIR / document)
    rows = source.splitlines()
    options = []
    for i, row in enumerate(rows[:-2]):
        if not (row.startswith(".TP") and rows[i + 1].startswith("\\fB\\-")):
            continue
        flags = tuple(_FLAG.findall(_unescape(rows[i + 1]).split("=")[0]))
        said = []
        for line in rows[i + 2 :]:
            if line.startswith((".TP", ".PP", ".SH", ".SS", ".IP", ".P", ".LP", ".RE")):
                break
            text = ROFF_TEXT_MACROS.match(line)
            said.append(_unescape(text.group(2).replace('"', "") if text else line))
        sentence = re.split(r"(?<=[.;:])\s", " ".join(w for w in said if w).strip())[0]
        if flags and sentence:
            options.append((flags, sentence.rstrip(".;:")))
    lines, blank = [], False
    for line in strip_roff(source).splitlines():
        line = line.rstrip()
        if line or not blank:
            lines.append(line)
        blank = not line
    return tuple(lines), tuple(options)


@functools.cache
def module_docstring(document: str) -> tuple[str, tuple[str, ...]]:
    """A standard-library file's docstring, its first paragraph on one line, and its source
    lines with the docstring taken out ("" and no lines where it has none)."""
    import ast

    root = Path(sysconfig.get_paths()["stdlib"])
    source = (root / document).read_text(errors="replace")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "", ()
    first = tree.body[0] if tree.body else None
    if not (
        isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant)
    ):
        return "", ()
    if not isinstance(first.value.value, str):
        return "", ()
    paragraph = " ".join(inspect.cleandoc(first.value.value).split("\n\n")[0].split())
    lines = source.splitlines()
    rest = lines[: first.lineno - 1] + lines[first.end_lineno :]
    while rest and not rest[0].strip():
        rest.pop(0)
    return paragraph, tuple(rest)


_CONSTANT = re.compile(r"[A-Z][A-Z0-9_]*")


@functools.cache
def module_constants(document: str) -> tuple[tuple[str, str, int], ...]:
    """A standard-library file's module-level constants set to a number: (name, the number as
    written, its line index), for names assigned once in the file and numbers of two or more
    characters (a 0 or a 1 is guessed, not read)."""
    import ast

    source, tree = _parsed(document)
    if tree is None:
        return ()
    found = []
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if not (isinstance(target, ast.Name) and _CONSTANT.fullmatch(target.id)):
            continue
        if not (isinstance(value, ast.Constant) and type(value.value) is int):
            continue
        literal = ast.get_source_segment(source, value) or ""
        if len(literal) >= 2 and source.count(f"{target.id} = ") == 1:
            found.append((target.id, literal, node.lineno - 1))
    return tuple(found)


@functools.cache
def documented_functions(document: str) -> tuple[tuple[str, str, int], ...]:
    """A standard-library file's functions and methods with a docstring: (name, the docstring's
    first sentence, the line of its `def`), for names defined once in the file and sentences of
    5-24 words found once in it."""
    import ast

    source, tree = _parsed(document)
    if tree is None:
        return ()
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("__"):
            continue
        doc = ast.get_docstring(node) or ""
        paragraph = " ".join(doc.split("\n\n")[0].split())
        said = re.split(r"(?<=[.!?])\s", paragraph)[0].rstrip(".")
        if (
            5 <= len(said.split()) <= 24
            and said[-1:].isalnum()
            and source.count(said) == 1
            and source.count(f"def {node.name}(") == 1
        ):
            found.append((node.name, said, node.lineno - 1))
    return tuple(sorted(found, key=lambda entry: entry[2]))


def _parsed(document: str):
    """A standard-library file's source and syntax tree (None where it does not parse)."""
    import ast

    source = (Path(sysconfig.get_paths()["stdlib"]) / document).read_text(errors="replace")
    try:
        return source, ast.parse(source)
    except SyntaxError:
        return source, None


# --- haystacks ----------------------------------------------------------------------------


def _shuffled_documents(source: str, split: str, seed: int) -> list[str]:
    names = [name for name in documents(source) if split_of(name) == split]
    if not names:
        raise LazymlxError(
            f"no {source} documents found for the {split} split on this machine "
            f"(looked in {DOC_DIR if source == 'pkgdoc' else MAN_DIR if source == 'man' else 'the stdlib'})"
        )
    random.Random(seed).shuffle(names)
    return names


class Haystack:
    """The first n units (sentences, or lines of code) of a source's split, documents in a seeded
    order, each document whole so the text reads as written. Documents are read only as far as
    a case needs, and the same (source, split, seed) always gives the same units."""

    def __init__(self, source: str, split: str, seed: int) -> None:
        self.source = source
        self._documents: Iterator[str] = iter(_shuffled_documents(source, split, seed))
        self._units: list[str] = []

    def __call__(self, n: int) -> list[str]:
        while len(self._units) < n:
            document = next(self._documents, None)
            if document is None:
                raise LazymlxError(f"the {self.source} text ran out at {len(self._units)} units")
            paragraphs = list(document_paragraphs(self.source, document))
            if self.source == "code":
                self._units += paragraphs + [""]
            else:
                self._units += split_sentences(paragraphs)
        return self._units[:n]


@functools.cache
def haystack(source: str, split: str, seed: int) -> Callable[[int], list[str]]:
    return Haystack(source, split, seed)
