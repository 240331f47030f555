"""The stub rules of memory compaction: one public format every compactor writes byte-identically.

A compacted memory's content is replaced by one line::

    [absorbed→Evermind v<version>] <first line>

- ``<version>`` is the absorbing model's package version (1-64 characters of
  ``[A-Za-z0-9._+-]``, starting alphanumeric, as package manifests require).
- ``<first line>`` is the original text's first non-blank line with every whitespace run
  collapsed to one space and the ends trimmed, cut to :data:`MAX_FIRST_LINE` characters (a cut
  line ends with ``…``, the ellipsis counted). A text with no visible character has no stub.

A stub is never stubbed again (:func:`make_stub` refuses one). Standard library only, so it
runs in the browser too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evermind.errors import ConfigError

#: The opening of every stub, up to the version.
STUB_OPEN = "[absorbed→Evermind v"
#: Longest first line a stub quotes, the ellipsis included.
MAX_FIRST_LINE = 120
ELLIPSIS = "…"

_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_STUB = re.compile(r"\[absorbed→Evermind v([A-Za-z0-9][A-Za-z0-9._+-]{0,63})\] (\S(?:.*\S)?)")
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Stub:
    """A parsed stub: the absorbing model's version and the quoted first line."""

    version: str
    first_line: str


def first_line(text: str) -> str:
    """The stub's quote of ``text``: its first non-blank line, collapsed, trimmed and capped.

    Raises:
        ConfigError: ``text`` is not a string or has no visible character.
    """
    if not isinstance(text, str):
        raise ConfigError(f"stub: text must be a string, got {type(text).__name__}")
    for line in text.splitlines():
        flat = _WHITESPACE.sub(" ", line).strip()
        if flat:
            if len(flat) <= MAX_FIRST_LINE:
                return flat
            return flat[: MAX_FIRST_LINE - 1].rstrip() + ELLIPSIS
    raise ConfigError("stub: the text has no visible character; nothing to quote")


def make_stub(version: str | int, text: str) -> str:
    """The stub of ``text`` absorbed by the model of ``version`` (see the module docstring).

    Raises:
        ConfigError: The version is malformed, the text is blank, or the text is a stub already.
    """
    version_text = str(version) if isinstance(version, int) and version >= 0 else version
    if not isinstance(version_text, str) or not _VERSION.fullmatch(version_text):
        raise ConfigError(
            f"stub: version must be 1-64 characters of [A-Za-z0-9._+-] starting alphanumeric "
            f"(or a non-negative int), got {version!r}"
        )
    if is_stub(text):
        raise ConfigError(f"stub: refusing to stub a stub ({text[:80]!r}); it is compacted already")
    return f"{STUB_OPEN}{version_text}] {first_line(text)}"


def parse_stub(text: str) -> Stub | None:
    """The stub ``text`` holds, or None when it is not exactly one well-formed stub line."""
    if not isinstance(text, str):
        return None
    match = _STUB.fullmatch(text)
    if match is None or "\n" in text or "\r" in text:
        return None
    return Stub(match.group(1), match.group(2))


def is_stub(text: str) -> bool:
    """Whether ``text`` is a stub (and so must never be compacted again)."""
    return parse_stub(text) is not None


__all__ = [
    "MAX_FIRST_LINE",
    "STUB_OPEN",
    "Stub",
    "first_line",
    "is_stub",
    "make_stub",
    "parse_stub",
]
