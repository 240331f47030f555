"""The Markdown and plain-text parsers: sections under heading breadcrumbs.

Markdown: ATX headings (``## Install``) and setext headings (a line underlined with ``===`` or
``---``) open sections; each section's breadcrumbs are the headings above it, outermost
first (``Guide > Install > Linux``). Lines inside a fenced code block (```` ``` ```` or
``~~~``) are never headings. A leading YAML-style front matter block (``---`` … ``---``) is
read as flat ``key: value`` metadata; its ``title`` becomes the document's title.
Plain text is one section with no breadcrumbs. Browser-safe: standard library only.
"""

from __future__ import annotations

import re

from evermind.ingest.documents import Document, ParseOptions, Section

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_FRONT_MATTER_KEY = re.compile(r"^([A-Za-z_][\w-]*)[ \t]*:[ \t]*(.*)$")


def fence_opener(line: str) -> str | None:
    """The fence marker (e.g. ```` ``` ````) a line opens or closes a code block with, or None."""
    found = _FENCE.match(line)
    return found.group(1) if found else None


def closes_fence(line: str, opener: str) -> bool:
    """Whether ``line`` closes a block opened by ``opener`` (same character, at least as long)."""
    marker = fence_opener(line)
    return (
        marker is not None
        and marker[0] == opener[0]
        and len(marker) >= len(opener)
        and not line.strip()[len(marker) :].strip()
    )


def _front_matter(lines: list[str]) -> tuple[dict[str, str], int]:
    """Reads a leading ``---`` block as flat metadata; returns it and the lines it used."""
    if not lines or lines[0].strip() != "---":
        return {}, 0
    meta: dict[str, str] = {}
    for index in range(1, len(lines)):
        if lines[index].strip() in ("---", "..."):
            return meta, index + 1
        found = _FRONT_MATTER_KEY.match(lines[index])
        if found:
            meta[found.group(1)] = found.group(2).strip().strip("\"'")
    return {}, 0  # no closing line: not front matter, just a thematic break


def parse_markdown(text: str, source: str, options: ParseOptions) -> Document:
    """Splits Markdown into one section per heading, each with its breadcrumbs.

    Args:
        text: The document.
        source: Its source id.
        options: Unused (Markdown takes no options).
    """
    del options
    lines = text.splitlines()
    front, start = _front_matter(lines)
    sections: list[Section] = []
    crumbs: list[tuple[int, str]] = []  # (level, heading)
    body: list[str] = []
    body_line = start + 1
    opener: str | None = None

    def flush() -> None:
        if "".join(body).strip():
            # Leading blank lines are dropped so that the section's line is its first text.
            skip = next(i for i, line in enumerate(body) if line.strip())
            sections.append(
                Section(
                    "\n".join(body[skip:]).strip("\n"),
                    tuple(h for _, h in crumbs),
                    body_line + skip,
                )
            )
        body.clear()

    def open_heading(level: int, heading: str, next_line: int) -> None:
        nonlocal body_line
        flush()
        while crumbs and crumbs[-1][0] >= level:
            crumbs.pop()
        if heading:
            crumbs.append((level, heading))
        body_line = next_line

    for index in range(start, len(lines)):
        line = lines[index]
        if opener is not None:
            if closes_fence(line, opener):
                opener = None
            body.append(line)
            continue
        marker = fence_opener(line)
        if marker is not None:
            opener = marker
            body.append(line)
            continue
        atx = _ATX.match(line)
        if atx:
            open_heading(len(atx.group(1)), (atx.group(2) or "").strip(), index + 2)
            continue
        setext = _SETEXT.match(line)
        if setext and body and body[-1].strip() and not fence_opener(body[-1]):
            heading = body.pop().strip()
            open_heading(1 if setext.group(1)[0] == "=" else 2, heading, index + 2)
            continue
        body.append(line)
    flush()
    title = front.get("title") or next((s.breadcrumbs[0] for s in sections if s.breadcrumbs), None)
    return Document(source, "markdown", tuple(sections), title, front)


def parse_text(text: str, source: str, options: ParseOptions) -> Document:
    """Plain text: one section, no breadcrumbs (the chunker splits it at blank lines)."""
    del options
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        return Document(source, "text", ())
    return Document(source, "text", (Section("\n".join(lines[first:]).strip(), (), first + 1),))


__all__ = ["closes_fence", "fence_opener", "parse_markdown", "parse_text"]
