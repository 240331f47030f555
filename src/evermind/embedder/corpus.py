"""The base embedder's distillation corpus, built offline from what this Python has (native-only).

Three sources, each read in a fixed order so a build is reproducible on one machine:

1. the standard library's docstrings and ``help()`` topics
   (:func:`evermind.train.corpus.iter_stdlib_docstrings`);
2. the docstrings of installed packages, read from their source with :mod:`ast` (nothing is
   imported, so no package runs code);
3. the descriptions installed packages give in their ``METADATA`` (their README as PyPI
   shows it: varied English prose beyond Python's own vocabulary).

Each is cut into paragraphs and sentences; a piece is kept when it reads as prose (3–80
words, mostly letters, no markup rows), and each distinct piece once.
"""

from __future__ import annotations

import ast
import logging
import re
import sys
import sysconfig
from collections.abc import Iterable, Iterator
from pathlib import Path

from evermind.errors import ConfigError

logger = logging.getLogger(__name__)

#: Shortest and longest piece kept, in characters.
MIN_CHARS, MAX_CHARS = 24, 400
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'`])")
_MARKUP = re.compile(r"^\s*(?:[-=~*#^`+|]{3,}|\.\. |>>>|\$ |:param|:type|:return|@)")


def _is_prose(piece: str) -> bool:
    words = piece.split()
    if not 3 <= len(words) <= 80 or not MIN_CHARS <= len(piece) <= MAX_CHARS:
        return False
    letters = sum(c.isalpha() or c == " " for c in piece)
    return letters >= 0.75 * len(piece) and not _MARKUP.match(piece)


def pieces(text: str) -> Iterator[str]:
    """The prose pieces of one document: whole short paragraphs, else their sentences."""
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in paragraph.splitlines()]
        if any(_MARKUP.match(line) for line in lines):
            continue
        flat = " ".join(line for line in lines if line)
        if _is_prose(flat) and len(flat) <= 200:
            yield flat
            continue
        for sentence in _SENTENCE_END.split(flat):
            if _is_prose(sentence):
                yield sentence


def _site_roots() -> list[Path]:
    roots = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    return sorted(Path(root) for root in roots if Path(root).is_dir())


def package_docstrings(limit_files: int = 20_000) -> Iterator[str]:
    """Docstrings of the installed packages' modules, classes and functions (sorted files)."""
    seen = 0
    for root in _site_roots():
        for path in sorted(root.rglob("*.py")):
            if seen >= limit_files:
                return
            if "/tests/" in str(path) or "/test/" in str(path):
                continue
            seen += 1
            try:
                tree = ast.parse(path.read_text("utf-8"))
            except (OSError, SyntaxError, UnicodeDecodeError, ValueError, RecursionError):
                continue
            for node in ast.walk(tree):
                if isinstance(
                    node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
                ):
                    doc = ast.get_docstring(node)
                    if doc:
                        yield doc


def package_descriptions() -> Iterator[str]:
    """The long descriptions (README bodies) in installed packages' ``METADATA`` files."""
    for root in _site_roots():
        for path in sorted(root.glob("*.dist-info/METADATA")):
            try:
                text = path.read_text("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            _, _, body = text.partition("\n\n")
            if body:
                yield body


def _stdlib() -> Iterator[str]:
    from evermind.train.corpus import iter_stdlib_docstrings

    return iter_stdlib_docstrings()


def build_corpus(limit: int, extra: Iterable[str] = ()) -> list[str]:
    """Up to ``limit`` distinct prose pieces: ``extra`` first, then the three sources in turn.

    The sources are interleaved (a piece from each in turn) so a small ``limit`` still
    samples all three.

    Raises:
        ConfigError: ``limit`` is not a positive int.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise ConfigError(f"corpus limit is {limit!r}; expected a positive int, e.g. 120000")
    out: dict[str, None] = {}
    for text in extra:
        for piece in pieces(text):
            out.setdefault(piece)
            if len(out) >= limit:
                return list(out)
    sources = [
        (p for doc in _stdlib() for p in pieces(doc)),
        (p for doc in package_docstrings() for p in pieces(doc)),
        (p for doc in package_descriptions() for p in pieces(doc)),
    ]
    while sources and len(out) < limit:
        for source in list(sources):
            following: str | None = next(source, None)
            if following is None:
                sources.remove(source)
            else:
                out.setdefault(following)
    logger.info("corpus: %d pieces (python %s)", len(out), sys.version.split()[0])
    return list(out)[:limit]
