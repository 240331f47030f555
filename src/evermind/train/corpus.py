"""The default training corpus: docstrings harvested from the Python standard library.

Evermind needs no data file to show what it does: every Python, including Pyodide in the
browser, ships its standard library, and the library's docstrings are a few megabytes of
varied, well-edited English prose with code. This module owns collecting them.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
import sys
import warnings
from collections.abc import Iterator
from types import ModuleType

from evermind.errors import ConfigError

__all__ = [
    "SKIPPED_MODULES",
    "harvest_stdlib_docstrings",
    "iter_harvest",
    "iter_stdlib_docstrings",
]

logger = logging.getLogger(__name__)

SKIPPED_MODULES = frozenset(
    {
        "antigravity",  # opens a web browser on import
        "this",  # prints the Zen of Python on import
        "idlelib",  # GUI; imports tkinter
        "tkinter",  # GUI; needs a display on some hosts
        "turtle",  # imports tkinter
        "turtledemo",  # imports tkinter
        "test",  # CPython's regression-test package: large, not in Pyodide
    }
)
"""Standard-library modules never imported: they have side effects or need a GUI."""

_SEPARATOR = "\n\n"


def _import_quietly(name: str) -> ModuleType | None:
    """Imports module ``name``; returns None when it is missing or fails on this host."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except (Exception, SystemExit) as err:  # any failure just means "not on this host"
        logger.debug("skipping stdlib module %s: %s", name, err)
        return None


def _is_public_submodule(leaf: str) -> bool:
    """Whether a submodule is harvested: no ``__main__`` (runs code), private or test modules."""
    return not (leaf.startswith("_") or leaf in {"test", "tests"} or leaf.startswith("test_"))


def _iter_modules(name: str) -> Iterator[tuple[str, ModuleType]]:
    """Yields ``name`` and, for a package, its public submodules depth-first in sorted order."""
    module = _import_quietly(name)
    if module is None:
        return
    yield name, module
    search_path = getattr(module, "__path__", None)
    if search_path is None:
        return
    children = sorted(info.name for info in pkgutil.iter_modules(search_path))
    for child in children:
        if _is_public_submodule(child):
            yield from _iter_modules(f"{name}.{child}")


def _member_docs(owner: object, module_name: str) -> Iterator[str]:
    """Yields docstrings of the classes / functions defined in ``owner`` (sorted by name)."""
    for name in sorted(vars(owner)):
        try:
            member = getattr(owner, name)
        except Exception:  # properties or lazy attributes that fail to resolve
            continue
        if not (inspect.isclass(member) or inspect.isroutine(member)):
            continue
        defined_in = getattr(member, "__module__", None) or module_name
        if defined_in != module_name and not defined_in.startswith("_"):
            continue  # re-exported from another public module: harvested there
        doc = getattr(member, "__doc__", None)
        if isinstance(doc, str):
            yield doc
        if inspect.isclass(member) and member is not owner:
            for method_name in sorted(vars(member)):
                method = vars(member)[method_name]
                method_doc = getattr(method, "__doc__", None)
                is_documented = inspect.isroutine(method) or isinstance(method, property)
                if is_documented and isinstance(method_doc, str):
                    yield method_doc


def iter_stdlib_docstrings() -> Iterator[str]:
    """Yields the distinct, cleaned docstrings of the standard library in a fixed order.

    Modules are visited in sorted order of ``sys.stdlib_module_names``, skipping dunder
    ones (``__hello__``), C test modules (``_test*``), :data:`SKIPPED_MODULES` and those
    that fail to import; private implementation modules (``_pydecimal``) are included;
    a package is followed by its public submodules (no ``__main__``, private or test
    modules), depth first, sorted. For each module: its own docstring, then those of its
    classes, their methods and its functions, sorted by name. Repeated docstrings are
    yielded once. Last come the language help topics of ``pydoc_data`` (the text
    ``help("if")`` shows), where the host ships them.

    Yields:
        Docstrings, each cleaned with ``inspect.cleandoc``.
    """
    seen: set[str] = set()
    for module_name in sorted(sys.stdlib_module_names):
        if module_name.startswith(("__", "_test")) or module_name in SKIPPED_MODULES:
            continue
        for name, module in _iter_modules(module_name):
            docs = [module.__doc__] if isinstance(module.__doc__, str) else []
            docs.extend(_member_docs(module, name))
            for doc in docs:
                cleaned = inspect.cleandoc(doc).strip()
                if cleaned and cleaned not in seen:
                    seen.add(cleaned)
                    yield cleaned
    yield from _help_topics()


def _help_topics() -> Iterator[str]:
    """Yields the texts ``help()`` shows for language topics (``pydoc_data``), sorted by name."""
    topics_module = _import_quietly("pydoc_data.topics")
    topics = getattr(topics_module, "topics", None)
    if not isinstance(topics, dict):
        return
    for name in sorted(topics):
        text = topics[name]
        if isinstance(text, str) and text.strip():
            yield text.strip()


def harvest_stdlib_docstrings(max_bytes: int) -> str:
    """Concatenates standard-library docstrings into a corpus of at most ``max_bytes``.

    The order is deterministic for a given Python build (see
    :func:`iter_stdlib_docstrings`); docstrings are separated by a blank line. The last
    docstring is cut at a character boundary to fit.

    Args:
        max_bytes: Upper bound on the UTF-8 size of the result, e.g. ``2_000_000``.

    Returns:
        The corpus text; shorter than ``max_bytes`` only if the library has less.

    Raises:
        ConfigError: ``max_bytes`` is not a positive integer.
    """
    return "".join(piece for piece, _ in iter_harvest(max_bytes))


def iter_harvest(max_bytes: int) -> Iterator[tuple[str, int]]:
    """:func:`harvest_stdlib_docstrings` piece by piece: each piece of the corpus (a
    docstring with its separator) and the UTF-8 bytes harvested so far, for a caller that
    reports progress or stops between pieces (the Studio's default corpus).

    Raises:
        ConfigError: ``max_bytes`` is not a positive integer (before anything is yielded).
    """
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise ConfigError(
            f"harvest_stdlib_docstrings: max_bytes is {max_bytes!r}; expected a positive int "
            "(hint: 2_000_000 for about 2 MB)"
        )
    return _harvest(max_bytes)


def _harvest(max_bytes: int) -> Iterator[tuple[str, int]]:
    used = 0
    for doc in iter_stdlib_docstrings():
        piece = (_SEPARATOR if used else "") + doc
        size = len(piece.encode("utf-8"))
        if used + size > max_bytes:
            room = max_bytes - used
            yield piece.encode("utf-8")[:room].decode("utf-8", errors="ignore"), max_bytes
            return
        used += size
        yield piece, used
