"""The ``evermind`` command's argument types and help format: file arguments checked while parsing.

Each file argument names what it must be with a ``type=``: :func:`package_file` (a
``.evermind`` package), :func:`embedder_spec` (``base`` or an embedder file),
:func:`text_file` (UTF-8 text), :func:`input_file` (any non-empty file), :func:`input_path`
(a file or a folder), :func:`folder`, :func:`output_file` (a file to write), or a
keyword-or-file source (:func:`corpus_source`, :func:`texts_source`). A bad
value fails in argparse, which names the argument: ``evermind eval: error: argument
--text-file: no such file: 'missing.txt'`` and exit code 2, before any heavy import or work.
The checks look only at the path and the first bytes; what a command finds later in the
content (and any ``OSError`` or ``UnicodeDecodeError`` past the checked head) is turned into
one line by :func:`evermind.cli.main`.

:class:`HelpFormatter` shows each option's default in ``--help``.
"""

from __future__ import annotations

import argparse
import codecs
import os
from collections.abc import Callable
from pathlib import Path

#: How much of a text file is decoded while parsing: enough to tell a binary file from text.
SNIFF_BYTES = 64 * 1024
#: The first bytes of every ZIP archive (a ``.evermind`` package is one) that holds a file.
ZIP_MAGIC = b"PK\x03\x04"
#: The ``__name__`` of the types that read UTF-8 text (how :func:`evermind.cli.main` tells which
#: argument a ``UnicodeDecodeError`` came from).
TEXT_TYPE_NAMES = ("text_file", "corpus_source", "texts")
#: Options whose default is a secret (``--token`` from ``$EVERMIND_TOKEN``): help never shows it.
SECRET_SUFFIXES = ("token", "api_key", "secret", "password")


class HelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help unless it says ``default:`` itself.

    Like :class:`argparse.ArgumentDefaultsHelpFormatter`, but quiet where the default means
    "not given" (``None``, ``False``, an empty list): those options say in words what happens
    without them. A secret's default (a token read from the environment) is never printed.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default:" in text
            or "%(default)" in text
            or default is argparse.SUPPRESS
            or default is None
            or default is False
            or default == []
            or action.dest.endswith(SECRET_SUFFIXES)
            or not (action.option_strings or action.nargs in ("?", "*"))
        ):
            return text
        return f"{text} (default: %(default)s)".lstrip()


def _exists(value: str) -> Path:
    path = Path(value).expanduser()
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no such file or folder: {value!r}")
    return path


def _regular(value: str, what: str) -> Path:
    path = _exists(value)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is a folder; expected {what}")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{value!r} cannot be read (permission denied)")
    if path.stat().st_size == 0:
        raise argparse.ArgumentTypeError(f"{value!r} is empty (0 bytes); expected {what}")
    return path


def _head(path: Path, size: int) -> bytes:
    try:
        with path.open("rb") as stream:
            return stream.read(size)
    except OSError as err:
        raise argparse.ArgumentTypeError(f"{str(path)!r} cannot be read ({err.strerror})") from err


def input_file(what: str) -> Callable[[str], str]:
    """A type: an existing, readable, non-empty file (``what`` completes "expected ...")."""

    def check(value: str) -> str:
        _regular(value, what)
        return value

    check.__name__ = "file"
    return check


def package_file(value: str) -> str:
    """A type: an existing ``.evermind`` package (a non-empty ZIP archive)."""
    path = _regular(value, "a .evermind package")
    if _head(path, len(ZIP_MAGIC)) != ZIP_MAGIC:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a .evermind package (not a ZIP archive); pass the file "
            "`evermind train` or the Studio wrote"
        )
    return value


def embedder_spec(value: str) -> str:
    """A type: ``base`` (the shipped base embedder) or an existing, non-empty embedder file
    (whether its content is one is checked when the command loads it)."""
    if value == "base":
        return value
    _regular(value, "'base' or an embedder file (.safetensors written by evermind build-embedder)")
    return value


def text_file(value: str) -> str:
    """A type: an existing, non-empty file whose first :data:`SNIFF_BYTES` are UTF-8 text."""
    path = _regular(value, "a UTF-8 text file")
    head = _head(path, SNIFF_BYTES)
    try:
        # Incremental, not final: a character cut at the end of the head is not an error.
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError as err:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not UTF-8 text (byte 0x{head[err.start]:02x} at offset {err.start}); "
            "expected a UTF-8 text file"
        ) from err
    if b"\0" in head:
        raise argparse.ArgumentTypeError(
            f"{value!r} holds NUL bytes (a binary file?); expected a UTF-8 text file"
        )
    return value


def input_path(value: str) -> str:
    """A type: an existing file or folder (the command reads what it finds there)."""
    _exists(value)
    return value


def folder(value: str) -> str:
    """A type: an existing folder."""
    if not _exists(value).is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is a file; expected a folder")
    return value


def output_file(value: str) -> str:
    """A type: a file to write: not an existing folder, and not under a file.

    A missing folder on the way is fine (the commands that write packages create it).
    """
    path = Path(value).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is a folder; expected a file name to write")
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise argparse.ArgumentTypeError(
                    f"cannot write {value!r}: {str(parent)!r} is a file, not a folder"
                )
            break
    return value


def corpus_source(value: str) -> str:
    """A type: ``default`` (the standard library's docstrings), a text file or a folder."""
    if value == "default":
        return value
    if _exists(value).is_dir():
        return value
    return text_file(value)


def texts_source(keyword: str | None = None) -> Callable[[str], str]:
    """A type: a memory file (``.db``), a text/JSONL file, or ``keyword`` when given."""

    def check(value: str) -> str:
        if keyword is not None and value == keyword:
            return value
        if Path(value).suffix == ".db":
            _regular(value, "an Evermind memory file")
            return value
        return text_file(value)

    check.__name__ = "texts"
    return check
