"""The record parsers: JSON, JSONL, CSV/TSV and in-memory row iterables.

Each record (a JSON object, a JSONL line, a CSV row, a mapping) becomes one section: the
chosen text fields or columns, joined by blank lines, are its text; every other field is its
``meta["fields"]``, which ``where`` filters read (:mod:`evermind.ingest.passages`). Records
whose text is empty are skipped.

**Typed cells.** A CSV/TSV cell is text; :func:`typed_cell` gives it the type it plainly has, so
``priority_rank < 3`` compares numbers: a decimal integer (``"3"``, ``"-12"``; no leading
zero, so ids such as ``"007"`` stay strings; at most 2**53) becomes an int, a decimal number
(``"2.5"``, ``"1e3"``, ``".5"``) a float (``"nan"``/``"inf"`` stay strings), ``true`` /
``false`` in any case a bool, and anything else stays the string it is (surrounding spaces
trimmed). An empty cell, and a JSON or row value of ``null``/None, is absent from the
fields (``exists field`` is false). JSON values keep their JSON types. A record's line is where it
starts in the file (its row number for row iterables), so a chunk can be cited.

Tables are bounded: at most :data:`MAX_COLUMNS` columns (a wider header is refused with the
count, before any row is read), and the work is linear in the number of cells.
Browser-safe: standard library only.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evermind.errors import InputError
from evermind.ingest.documents import Document, ParseOptions, Section

#: Most columns a CSV/TSV header or a set of rows may name. Every chunk of a row carries
#: its other columns as metadata, so a wider table costs (rows x columns) per chunk.
MAX_COLUMNS = 1024


def _lookup(record: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    """``(found, value)`` of a top-level field or a dotted path into nested objects."""
    if path in record:
        return True, record[path]
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return False, None
        value = value[part]
    return True, value


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(v.strip() for v in value if v.strip())
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


_INT_RE = re.compile(r"^[+-]?(0|[1-9][0-9]*)$")
_FLOAT_RE = re.compile(r"^[+-]?(([1-9][0-9]*|0)?\.[0-9]+|([1-9][0-9]*|0)\.?)([eE][+-]?[0-9]+)?$")
_MAX_SAFE_INT = 2**53


def typed_cell(cell: str) -> str | int | float | bool | None:
    """A CSV/TSV cell as the value it plainly is (see the module docstring); None when empty."""
    text = cell.strip()
    if not text:
        return None
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if _INT_RE.match(text):
        number = int(text)
        return number if abs(number) <= _MAX_SAFE_INT else text
    if _FLOAT_RE.match(text):
        value = float(text)
        return value if math.isfinite(value) else text
    return text


def _jsonable(value: Any) -> Any:
    """A row's value as JSON can hold it: scalars as they are, anything else as its text."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _record_section(record: Mapping[str, Any], chosen: Sequence[str], line: int) -> Section | None:
    """One record as a section: the chosen fields as text, the rest under ``fields``."""
    texts = []
    used = set()
    for name in chosen:
        found, value = _lookup(record, name)
        if found:
            used.add(name.split(".")[0] if name not in record else name)
            text = _as_text(value)
            if text:
                texts.append(text)
    if not texts:
        return None
    rest = {k: v for k, v in record.items() if k not in used and v is not None}
    return Section("\n\n".join(texts), (), line, {"fields": rest} if rest else {})


def _json_fields(
    records: Sequence[tuple[int, Mapping[str, Any]]], options: ParseOptions
) -> list[str]:
    if options.fields is not None:
        return list(options.fields)
    names: dict[str, None] = {}
    for _, record in records:
        for name, value in record.items():
            if isinstance(value, str):
                names.setdefault(name)
    return list(names)


def _check_fields_exist(
    records: Sequence[tuple[int, Mapping[str, Any]]], chosen: Sequence[str], source: str
) -> None:
    for name in chosen:
        if not any(_lookup(record, name)[0] for _, record in records):
            seen = sorted({k for _, r in records for k in r})
            raise InputError(
                f"{source}: no record has the field {name!r}; the records have {seen}; "
                "hint: pass --fields with names from that list"
            )


def _records_document(
    records: list[tuple[int, Mapping[str, Any]]], source: str, kind: str, options: ParseOptions
) -> Document:
    chosen = _json_fields(records, options)
    if records and options.fields is not None:
        _check_fields_exist(records, chosen, source)
    sections = []
    for line, record in records:
        section = _record_section(record, chosen, line)
        if section is not None:
            sections.append(section)
    return Document(source, kind, tuple(sections), None, {"text_fields": chosen})


def parse_jsonl(text: str, source: str, options: ParseOptions) -> Document:
    """One JSON object per line; blank lines are skipped.

    Raises:
        InputError: A line is not valid JSON, or not an object (the message names the line).
    """
    records: list[tuple[int, Mapping[str, Any]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(
                f"{source}: line {number}: bad JSON ({err.msg} at column {err.colno}); "
                "hint: JSONL wants one complete JSON object per line"
            ) from err
        if not isinstance(value, dict):
            raise InputError(
                f"{source}: line {number}: expected a JSON object, got {type(value).__name__}"
            )
        records.append((number, value))
    return _records_document(records, source, "jsonl", options)


def parse_json(text: str, source: str, options: ParseOptions) -> Document:
    """A JSON array of objects, or one object (a single record).

    Raises:
        InputError: Not valid JSON (the message names line and column), or neither an
            object nor an array of objects.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(
            f"{source}: line {err.lineno}, column {err.colno}: bad JSON ({err.msg})"
        ) from err
    items = value if isinstance(value, list) else [value]
    records: list[tuple[int, Mapping[str, Any]]] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise InputError(
                f"{source}: item {index}: expected a JSON object, got {type(item).__name__}; "
                "hint: a JSON source is an object or an array of objects"
            )
        # A JSON array has no per-record lines without a full parser; the item number is
        # the record's position (1-based) instead.
        records.append((index + 1, item))
    return _records_document(records, source, "json", options)


def _text_columns(header: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Columns holding at least one value with whitespace in it (prose), else every column."""
    prose = [
        name
        for name in header
        if any(isinstance(r.get(name), str) and len(str(r[name]).split()) > 1 for r in rows)
    ]
    return prose or list(header)


def _check_width(count: int, source: str, where: str) -> None:
    if count > MAX_COLUMNS:
        raise InputError(
            f"{source}: {where}{count} columns, over the limit of {MAX_COLUMNS}; hint: keep "
            "the columns that matter (e.g. with a spreadsheet or `cut -d, -f1-20`), or ingest "
            "the table as text with --parser text"
        )


def _rows_document(
    header: Sequence[str],
    rows: list[tuple[int, Mapping[str, Any]]],
    source: str,
    kind: str,
    options: ParseOptions,
) -> Document:
    _check_width(len(header), source, "")
    if options.columns is not None:
        missing = [c for c in options.columns if c not in header]
        if missing:
            raise InputError(
                f"{source}: no column {missing[0]!r}; the columns are {list(header)}; "
                "hint: pass --columns with names from the header"
            )
        chosen = list(options.columns)
    else:
        chosen = _text_columns(header, [r for _, r in rows])
    text_columns = frozenset(chosen)  # a set: the rest of a row in time linear in its width
    cells = kind in ("csv", "tsv")  # text cells get their plain type; rows keep theirs
    sections = []
    for line, row in rows:
        texts = [_as_text(row.get(name)) for name in chosen]
        text = "\n\n".join(t for t in texts if t)
        if not text:
            continue
        rest = {}
        for name, value in row.items():
            if name in text_columns:
                continue
            kept = typed_cell(value) if cells and isinstance(value, str) else _jsonable(value)
            if kept is not None:
                rest[name] = kept
        sections.append(Section(text, (), line, {"fields": rest} if rest else {}))
    return Document(source, kind, tuple(sections), None, {"text_columns": chosen})


def parse_csv(text: str, source: str, options: ParseOptions) -> Document:
    """A CSV (or, with a tab delimiter, TSV) file with a header row.

    Raises:
        InputError: No header, more than :data:`MAX_COLUMNS` columns, a row with more fields
            than the header, or malformed quoting (the message names the line).
    """
    delimiter = options.delimiter or ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    try:
        header = next(reader, None)
        if header is None or not any(h.strip() for h in header):
            raise InputError(f"{source}: line 1: expected a header row naming the columns")
        _check_width(len(header), source, "line 1: ")
        header = [h.strip() for h in header]
        rows: list[tuple[int, Mapping[str, Any]]] = []
        start = reader.line_num + 1
        for row in reader:
            if len(row) > len(header):
                raise InputError(
                    f"{source}: line {start}: {len(row)} fields but the header names "
                    f"{len(header)}; hint: quote values that contain {delimiter!r}"
                )
            if any(cell.strip() for cell in row):
                rows.append((start, dict(zip(header, row, strict=False))))
            start = reader.line_num + 1
    except csv.Error as err:
        raise InputError(f"{source}: line {reader.line_num}: bad CSV ({err})") from err
    return _rows_document(header, rows, source, "csv", options)


def parse_tsv(text: str, source: str, options: ParseOptions) -> Document:
    """A tab-separated file with a header row (see :func:`parse_csv`)."""
    delimiter = options.delimiter or "\t"
    chosen = ParseOptions(options.fields, options.columns, delimiter)
    document = parse_csv(text, source, chosen)
    return Document(source, "tsv", document.sections, None, document.meta)


def parse_rows(
    rows: Iterable[Mapping[str, Any]],
    source: str,
    columns: Sequence[str] | None = None,
) -> Document:
    """Rows from memory (a query result, a DataFrame's records) as a document.

    Args:
        rows: Mappings of column name to value.
        source: The source id the rows are stored under.
        columns: The text columns; None: every column with prose in it.

    Raises:
        InputError: A row is not a mapping, a named column is in no row, or the rows name
            more than :data:`MAX_COLUMNS` columns.
    """
    table: list[tuple[int, Mapping[str, Any]]] = []
    header: dict[str, None] = {}
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, Mapping):
            raise InputError(
                f"{source}: row {number}: expected a mapping, got {type(row).__name__}"
            )
        header.update(dict.fromkeys(row))
        _check_width(len(header), source, f"row {number}: ")
        table.append((number, row))
    options = ParseOptions(columns=None if columns is None else tuple(columns))
    return _rows_document(list(header), table, source, "rows", options)


__all__ = [
    "MAX_COLUMNS",
    "parse_csv",
    "parse_json",
    "parse_jsonl",
    "parse_rows",
    "parse_tsv",
    "typed_cell",
]
