"""The values ingestion passes along: a parsed ``Document`` of ``Section``\\ s, and parse options.

A parser turns one source's text into a :class:`Document`: an ordered list of sections, each
with the heading path it sits under (its *breadcrumbs*), the line it starts on and metadata
(a CSV row's other columns, a JSON record's other fields). The chunker cuts sections into
chunks and never joins two sections, so every chunk's breadcrumbs are exact.
Browser-safe: standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evermind.errors import ConfigError

#: Longest source id accepted (it is part of every chunk's memory key, at most 512 long).
MAX_SOURCE_ID = 400
#: What breadcrumbs are joined with in a chunk's text and its ``meta["breadcrumb"]``.
CRUMB_SEPARATOR = " > "


@dataclass(frozen=True)
class Section:
    """A run of text under one heading path (or one record of a table).

    Attributes:
        text: The text, as written (Markdown stays Markdown; code fences stay fenced).
        breadcrumbs: The headings above it, outermost first, e.g. ``("Guide", "Install")``.
        line: The 1-based line of the source the text starts on.
        meta: JSON-serialisable extra fields every chunk of the section carries.
    """

    text: str
    breadcrumbs: tuple[str, ...] = ()
    line: int = 1
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Document:
    """One parsed source.

    Attributes:
        source: The source id (a path relative to the sync's base, or a caller's name).
        kind: The parser that made it (``markdown``, ``html``, ``csv``, ...).
        sections: The sections, in reading order.
        title: The document's title, when it has one (HTML ``<title>``, front matter).
        meta: Fields every chunk of the document carries.
    """

    source: str
    kind: str
    sections: tuple[Section, ...]
    title: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ParseOptions:
    """What the record parsers take as text.

    Attributes:
        fields: JSON/JSONL fields (dotted paths for nested ones) whose values are the text;
            every other field becomes metadata. None: every top-level string field.
        columns: CSV/TSV/row columns that are the text; the others become metadata. None:
            every column holding at least one value with whitespace in it (prose).
        delimiter: CSV delimiter; None picks ``\\t`` for ``.tsv`` and ``,`` otherwise.
    """

    fields: tuple[str, ...] | None = None
    columns: tuple[str, ...] | None = None
    delimiter: str | None = None

    def digest_fields(self) -> dict[str, Any]:
        """The options as plain data (part of a source's manifest fingerprint)."""
        return {
            "fields": None if self.fields is None else list(self.fields),
            "columns": None if self.columns is None else list(self.columns),
            "delimiter": self.delimiter,
            # CSV cells are typed (numbers, bools; empty cells absent): a store written
            # before they were re-ingests once, so its rows' fields become filterable.
            "cells": "typed",
        }


def check_source_id(source: object) -> str:
    """Returns ``source`` if it can name a source (and so be part of memory keys).

    Raises:
        ConfigError: Not a non-empty string of printable characters, at most
            ``MAX_SOURCE_ID`` long.
    """
    if not isinstance(source, str) or not source.strip() or not source.isprintable():
        raise ConfigError(
            f"ingest: a source id must be a non-empty printable string, got {source!r}; "
            "hint: use the file's relative path or a stable name such as 'tickets-2024'"
        )
    if len(source) > MAX_SOURCE_ID:
        raise ConfigError(
            f"ingest: source id of {len(source)} characters is over the limit of "
            f"{MAX_SOURCE_ID}; hint: ingest from a folder closer to the file (--base)"
        )
    return source


__all__ = [
    "CRUMB_SEPARATOR",
    "MAX_SOURCE_ID",
    "Document",
    "ParseOptions",
    "Section",
    "check_source_id",
]
