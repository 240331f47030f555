"""The HTML parser: the page's main text under its heading breadcrumbs, the title kept.

Built on :class:`html.parser.HTMLParser` (character references decoded). What is read:

- only the content of ``<main>`` (or ``role="main"``) when the page has one, else the body;
- never ``<script>``, ``<style>``, ``<nav>``, ``<noscript>``, ``<template>``, ``<svg>``,
  ``<iframe>``, ``<header>``, ``<footer>``, ``<aside>`` or ``<form>`` (boilerplate, not text);
- ``<h1>`` … ``<h6>`` open sections with breadcrumbs, as Markdown headings do; block
  elements (``p``, ``li``, ``tr``, ``div``, ...) end paragraphs; list items start with
  ``- ``; table cells are joined with `` | ``;
- ``<pre>`` keeps its whitespace and becomes a fenced code block, which the chunker never
  splits.

The ``<title>`` is the document's title and, on a page without headings, its breadcrumb.
Browser-safe: standard library only.
"""

from __future__ import annotations

from html.parser import HTMLParser

from evermind.ingest.documents import Document, ParseOptions, Section

_SKIP = frozenset(
    {"script", "style", "nav", "noscript", "template", "svg", "iframe", "header", "footer"}
    | {"aside", "form", "head", "button", "select"}
)
_BLOCK = frozenset(
    {"p", "div", "li", "ul", "ol", "table", "tr", "br", "section", "article", "blockquote"}
    | {"dd", "dt", "dl", "hr", "figure", "figcaption", "main", "body", "details", "summary"}
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}


class _PageReader(HTMLParser):
    """Collects ``(in_main, breadcrumbs, line, paragraph)`` blocks in reading order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title: str | None = None
        self.blocks: list[tuple[bool, tuple[str, ...], int, str]] = []
        self.saw_main = False
        self._skip: list[str] = []
        self._main_depth = 0
        self._crumbs: list[tuple[int, str]] = []
        self._words: list[str] = []
        self._line = 1
        self._heading: int | None = None
        self._pre: list[str] | None = None
        self._in_title = False
        self._title_parts: list[str] = []
        self._prefix = ""

    # -------------------------------------------------------------- structure

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
            return
        if self._skip:
            if tag in _SKIP:
                self._skip.append(tag)
            return
        if tag in _SKIP:
            self._skip.append(tag)
            return
        if tag == "main" or dict(attrs).get("role") == "main":
            self._main_depth += 1
            self.saw_main = True
        if tag in _HEADINGS:
            self._flush()
            self._heading = _HEADINGS[tag]
        elif tag == "pre":
            self._flush()
            self._pre = []
        elif tag in _BLOCK:
            self._flush()
            if tag == "li":
                self._prefix = "- "
        elif tag in ("td", "th") and self._words:
            self._words.append("|")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            self.title = " ".join("".join(self._title_parts).split()) or None
            return
        if self._skip:
            if tag == self._skip[-1]:
                self._skip.pop()
            return
        if tag in _HEADINGS and self._heading is not None:
            heading = " ".join(self._words)
            self._words.clear()
            level, self._heading = self._heading, None
            while self._crumbs and self._crumbs[-1][0] >= level:
                self._crumbs.pop()
            if heading:
                self._crumbs.append((level, heading))
            self._line = self.getpos()[0]
        elif tag == "pre" and self._pre is not None:
            code = "".join(self._pre).strip("\n")
            self._pre = None
            if code.strip():
                fence = "````" if "```" in code else "```"
                self._emit(f"{fence}\n{code}\n{fence}")
        elif tag in _BLOCK:
            self._flush()
        if tag == "main" and self._main_depth:
            self._main_depth -= 1

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self._title_parts.append(data)
            return
        if self._skip:
            return
        if self._pre is not None:
            if not self._pre:
                self._line = self.getpos()[0]
            self._pre.append(data)
            return
        words = data.split()
        if words and not self._words and self._heading is None:
            self._line = self.getpos()[0]
        self._words.extend(words)

    # -------------------------------------------------------------- output

    def _flush(self) -> None:
        if self._heading is None and self._words:
            self._emit(self._prefix + " ".join(self._words))
            self._words.clear()
        self._prefix = ""

    def _emit(self, paragraph: str) -> None:
        crumbs = tuple(h for _, h in self._crumbs)
        self.blocks.append((self._main_depth > 0, crumbs, self._line, paragraph))

    def finish(self) -> None:
        self.close()
        self._flush()


def parse_html(text: str, source: str, options: ParseOptions) -> Document:
    """Reads an HTML page's main text into sections under its heading breadcrumbs.

    Args:
        text: The page.
        source: Its source id.
        options: Unused (HTML takes no options).
    """
    del options
    reader = _PageReader()
    reader.feed(text)
    reader.finish()
    blocks = [b for b in reader.blocks if b[0]] if reader.saw_main else reader.blocks
    sections: list[Section] = []
    for _, crumbs, line, paragraph in blocks:
        crumbs = crumbs or ((reader.title,) if reader.title else ())
        if sections and sections[-1].breadcrumbs == crumbs:
            last = sections[-1]
            sections[-1] = Section(f"{last.text}\n\n{paragraph}", crumbs, last.line)
        else:
            sections.append(Section(paragraph, crumbs, line))
    return Document(source, "html", tuple(sections), reader.title)


__all__ = ["parse_html"]
