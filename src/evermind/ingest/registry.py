"""The parser registry (by name and by file extension) and the decoding of a source's bytes.

A parser is any function ``parser(text, source, options) -> Document``. The default
registry, :data:`PARSERS`, knows ``markdown`` (``.md``, ``.markdown``, ``.mdx``), ``html``
(``.html``, ``.htm``, ``.xhtml``), ``json``, ``jsonl`` (``.jsonl``, ``.ndjson``), ``csv``,
``tsv`` (``.tsv``, ``.tab``) and ``text`` (``.txt``, ``.text``, ``.rst``, ``.log``). Add
your own with :func:`register_parser` (or ``PARSERS.register``)::

    def parse_org(text, source, options):
        ...
        return Document(source, "org", sections)

    register_parser("org", parse_org, extensions=[".org"])

Browser-safe: standard library only.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable

from evermind.errors import ConfigError, InputError
from evermind.ingest.documents import Document, ParseOptions
from evermind.ingest.htmltext import parse_html
from evermind.ingest.markdown import parse_markdown, parse_text
from evermind.ingest.tabular import parse_csv, parse_json, parse_jsonl, parse_tsv

#: ``parser(text, source, options) -> Document``.
Parser = Callable[[str, str, ParseOptions], Document]


class ParserRegistry:
    """Parsers by name, and the name each file extension maps to."""

    def __init__(self) -> None:
        self._parsers: dict[str, Parser] = {}
        self._extensions: dict[str, str] = {}

    def register(
        self, name: str, parser: Parser, extensions: Iterable[str] = (), *, replace: bool = False
    ) -> None:
        """Adds ``parser`` under ``name``, used for files ending in any of ``extensions``.

        Args:
            name: The parser's name (what ``parser=`` and ``--parser`` take).
            parser: ``parser(text, source, options) -> Document``.
            extensions: File extensions with their dot, e.g. ``[".org"]`` (case-insensitive).
            replace: Allow replacing an existing name or extension mapping.

        Raises:
            ConfigError: A bad name, a non-callable parser, an extension without a dot, or a
                name/extension already taken (without ``replace``).
        """
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"register_parser: name must be an identifier, got {name!r}")
        if not callable(parser):
            raise ConfigError(f"register_parser: {name!r}: parser must be callable")
        if name in self._parsers and not replace:
            raise ConfigError(
                f"register_parser: {name!r} is registered already; hint: pass replace=True"
            )
        wanted = [e.lower() for e in extensions]
        for extension in wanted:
            if not extension.startswith(".") or len(extension) < 2:
                raise ConfigError(
                    f"register_parser: extension {extension!r} must start with a dot, e.g. '.org'"
                )
            taken = self._extensions.get(extension)
            if taken is not None and taken != name and not replace:
                raise ConfigError(
                    f"register_parser: {extension} is parsed by {taken!r} already; "
                    "hint: pass replace=True"
                )
        self._parsers[name] = parser
        for extension in wanted:
            self._extensions[extension] = name

    def names(self) -> list[str]:
        """The registered parser names, sorted."""
        return sorted(self._parsers)

    def extensions(self) -> dict[str, str]:
        """Extension -> parser name."""
        return dict(self._extensions)

    def get(self, name: str) -> Parser:
        """The parser called ``name``.

        Raises:
            ConfigError: No parser of that name.
        """
        try:
            return self._parsers[name]
        except KeyError:
            raise ConfigError(
                f"ingest: no parser named {name!r}; registered: {', '.join(self.names())}"
            ) from None

    def name_for(self, filename: str) -> str | None:
        """The parser name for ``filename``'s extension, or None when none is registered."""
        extension = posixpath.splitext(filename.replace("\\", "/"))[1].lower()
        return self._extensions.get(extension)

    def for_file(self, filename: str) -> tuple[str, Parser]:
        """``(name, parser)`` for ``filename`` by its extension.

        Raises:
            InputError: No parser handles the extension (the message lists the known ones).
        """
        name = self.name_for(filename)
        if name is None:
            extension = posixpath.splitext(filename)[1] or "(no extension)"
            raise InputError(
                f"{filename}: unknown type {extension}; known: "
                f"{', '.join(sorted(self._extensions))}; hint: pass parser='text' (--parser "
                "text) or register a parser for it"
            )
        return name, self._parsers[name]


def decode(data: bytes, source: str) -> str:
    """UTF-8 text of a source's bytes (a leading byte-order mark dropped).

    Raises:
        InputError: The bytes are not UTF-8; the message names the line and the byte.
    """
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise InputError(
            f"{source}: line {line}: undecodable bytes at offset {err.start} "
            f"({data[err.start : err.start + 4]!r}: {err.reason}); expected UTF-8 text; "
            "hint: convert it first, e.g. iconv -f latin1 -t utf-8"
        ) from None


#: The default registry every ingest function uses unless given another.
PARSERS = ParserRegistry()
PARSERS.register("markdown", parse_markdown, [".md", ".markdown", ".mdx"])
PARSERS.register("html", parse_html, [".html", ".htm", ".xhtml"])
PARSERS.register("json", parse_json, [".json"])
PARSERS.register("jsonl", parse_jsonl, [".jsonl", ".ndjson"])
PARSERS.register("csv", parse_csv, [".csv"])
PARSERS.register("tsv", parse_tsv, [".tsv", ".tab"])
PARSERS.register("text", parse_text, [".txt", ".text", ".rst", ".log"])


def register_parser(
    name: str, parser: Parser, extensions: Iterable[str] = (), *, replace: bool = False
) -> None:
    """Adds a parser to the default registry (see :meth:`ParserRegistry.register`)."""
    PARSERS.register(name, parser, extensions, replace=replace)


__all__ = ["PARSERS", "Parser", "ParserRegistry", "decode", "register_parser"]
