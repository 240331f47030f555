"""Checks on what a person drops into the Data panel (browser-safe).

:func:`check_text_bytes` refuses binary content with the reason (NUL bytes, a high share of
bytes that are not UTF-8 text or are control characters); :func:`check_csv` parses a CSV
with the standard library's :mod:`csv` module and reports the first problems by line
(ragged rows, an unterminated quote). Both raise :class:`~evermind.errors.ConfigError` in
words the page shows as they are.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from evermind.errors import ConfigError

#: Highest share of control characters (other than tab, newline, carriage return, form
#: feed) a text may hold before it is taken for binary.
MAX_CONTROL_SHARE = 0.02
#: Highest share of bytes that do not decode as UTF-8.
MAX_INVALID_SHARE = 0.01
#: Ragged rows listed in a CSV problem report.
MAX_REPORTED_ROWS = 3
_ALLOWED_CONTROLS = frozenset("\t\n\r\f")


def check_text_bytes(name: str, data: bytes) -> str:
    """The text of ``data`` (UTF-8, BOM dropped), or a :class:`ConfigError` saying why it is
    not text: NUL bytes, invalid UTF-8 or control characters above their share."""
    if not data:
        raise ConfigError(f"{name}: the file is empty")
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ConfigError(
            f"{name}: refused as binary: it contains NUL bytes (the first at byte {nul:,}); "
            "text files never do. Export it as plain text (UTF-8) first."
        )
    text = data.decode("utf-8-sig", errors="replace")
    invalid = text.count("\ufffd") - data.decode("utf-8-sig", errors="ignore").count("\ufffd")
    if invalid > MAX_INVALID_SHARE * len(data):
        raise ConfigError(
            f"{name}: refused as binary: {invalid / len(data):.0%} of its {len(data):,} bytes "
            "are not UTF-8 text. Convert it to UTF-8 text first."
        )
    if invalid:
        try:
            data.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise ConfigError(
                f"{name}: not UTF-8 text (an invalid byte at {err.start:,}); convert it to UTF-8"
            ) from err
    controls = sum(1 for ch in text if ch < " " and ch not in _ALLOWED_CONTROLS)
    if controls > MAX_CONTROL_SHARE * len(text):
        raise ConfigError(
            f"{name}: refused as binary: {controls / len(text):.0%} of its characters are "
            "control characters, which text does not have."
        )
    return text


def check_csv(name: str, text: str) -> dict[str, Any]:
    """Parses ``text`` as CSV (the stdlib :mod:`csv` module, strict); returns ``{columns,
    rows}`` or raises :class:`ConfigError` naming the line of the first problems: an
    unterminated quote, a stray quote, rows with more or fewer fields than the header."""
    reader = csv.reader(io.StringIO(text), strict=True)
    rows: list[list[str]] = []
    ragged: list[str] = []
    start = 1
    try:
        for row in reader:
            if row:
                rows.append(row)
                width = len(rows[0])
                if len(row) != width and len(ragged) < MAX_REPORTED_ROWS:
                    ragged.append(f"line {start} has {len(row)} fields, the header {width}")
            start = reader.line_num + 1
    except csv.Error as err:
        what = str(err)
        if "unexpected end of data" in what:
            raise ConfigError(
                f"{name}: CSV problem: a quoted field that starts on line {start} is never "
                'closed (an unterminated quote); every " that opens a field needs its pair.'
            ) from err
        raise ConfigError(
            f"{name}:{reader.line_num}: CSV problem on line {reader.line_num}: {what}"
        ) from err
    if not rows:
        raise ConfigError(f"{name}: the CSV has no rows")
    if ragged:
        raise ConfigError(
            f"{name}: CSV problem: rows do not match the header's {len(rows[0])} columns "
            f"({'; '.join(ragged)}). Fix the rows or quote fields that contain commas."
        )
    return {"columns": rows[0], "rows": len(rows) - 1}
