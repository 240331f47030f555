"""Turns user files into training text (browser-safe).

The Studio's drag-and-drop and ``evermind train --corpus PATH`` share these rules:
``.txt``/``.md``/``.rst`` and other plain text as is; ``.json`` (a string, a list of strings, or
objects whose string fields are taken — ``text``/``content``/``body`` first); ``.jsonl`` one
such value per line; ``.csv`` the text-looking columns (or the one named with ``column=``).
Documents are separated by a blank line.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from evermind.errors import ConfigError

PREFERRED_FIELDS = ("text", "content", "body", "message", "description", "title")
TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst", ".text", ".py", ".html", ".log")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if value.strip():
            yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        preferred = [k for k in PREFERRED_FIELDS if isinstance(value.get(k), str)]
        keys = preferred or [k for k, v in value.items() if isinstance(v, str | list | dict)]
        for key in keys:
            yield from _strings(value[key])


def _csv_text(text: str, column: str | None) -> Iterator[str]:
    reader = csv.DictReader(io.StringIO(text))
    fields = reader.fieldnames or []
    if column is not None and column not in fields:
        raise ConfigError(f"CSV has no column {column!r}; columns are: {', '.join(fields)}")
    rows = list(reader)
    if column is None:
        # Text-looking columns: those whose values are mostly not numbers, longest first.
        def wordy(name: str) -> bool:
            values = [r.get(name) or "" for r in rows[:200]]
            return sum(any(c.isalpha() for c in v) for v in values) > len(values) / 2

        columns = [f for f in fields if wordy(f)] or fields
    else:
        columns = [column]
    for row in rows:
        parts = [row.get(c) or "" for c in columns]
        line = " ".join(p.strip() for p in parts if p and p.strip())
        if line:
            yield line


def extract_text(name: str, data: bytes | str, column: str | None = None) -> str:
    """The training text of one file.

    Args:
        name: File name; its suffix decides the format.
        data: The file's bytes (UTF-8; a BOM is dropped) or text.
        column: For CSV, the column to use (default: every text-looking column).

    Raises:
        ConfigError: The file is not UTF-8 text or not valid JSON/JSONL/CSV; the message
            names the file and the line.
    """
    try:
        text = data.decode("utf-8-sig") if isinstance(data, bytes) else data
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{name}: not UTF-8 text (byte {err.start}); convert it to UTF-8"
        ) from err
    lower = name.lower()
    if lower.endswith(".jsonl") or lower.endswith(".ndjson"):
        docs: list[str] = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    docs.extend(_strings(json.loads(line)))
                except json.JSONDecodeError as err:
                    raise ConfigError(f"{name}:{number}: invalid JSON ({err.msg})") from err
        return "\n\n".join(docs)
    if lower.endswith(".json"):
        try:
            return "\n\n".join(_strings(json.loads(text)))
        except json.JSONDecodeError as err:
            raise ConfigError(f"{name}:{err.lineno}: invalid JSON ({err.msg})") from err
    if lower.endswith(".csv"):
        return "\n".join(_csv_text(text, column))
    return text.strip()
