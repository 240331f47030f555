"""Strict JSON parsing and canonical JSON writing for `.evermind` package members.

This module owns the JSON rules of the format: what the reader accepts (one object per
member, no duplicate keys, no NaN/Infinity, bounded nesting) and the one canonical form
the writer emits (sorted keys, two-space indent, UTF-8, trailing newline), which is what
makes the text members byte-for-byte reproducible.
"""

from __future__ import annotations

import json
import math
from typing import Any

from evermind.errors import PackageError

#: Deepest nesting accepted in any JSON member (the format never needs more than a few).
MAX_JSON_DEPTH = 64


def _reject_constant(token: str) -> float:
    """Refuse the non-standard JSON constants NaN, Infinity and -Infinity."""
    raise ValueError(f"non-finite number {token} is not allowed; expected a finite number")


def _finite_float(token: str) -> float:
    """Parse a JSON float literal, refusing ones that overflow to infinity (e.g. 1e999)."""
    value = float(token)
    if not math.isfinite(value):
        raise ValueError(f"number {token[:40]} overflows a double; expected a finite number")
    return value


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Build a dict from key/value pairs, refusing a key that appears twice."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r} in one object; expected unique keys")
        result[key] = value
    return result


def _depth(value: Any, limit: int) -> int:
    """Return the nesting depth of a parsed JSON value, stopping once it exceeds `limit`."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if deepest > limit:
                return deepest
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def loads_strict(raw: bytes | str, *, member: str) -> Any:
    """Parse one JSON document under the package's strict rules.

    Args:
        raw: The member's bytes (UTF-8, no BOM) or already decoded text.
        member: The member name used in error messages, e.g. ``"manifest.json"``.

    Returns:
        The parsed value (dict, list, str, int, float, bool or None).

    Raises:
        PackageError: The bytes are not UTF-8, not JSON, contain duplicate keys,
            non-finite numbers, or nest deeper than :data:`MAX_JSON_DEPTH`.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        value = json.loads(
            text,
            object_pairs_hook=_unique_object,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )
    except UnicodeDecodeError as err:
        raise PackageError(
            f"{member}: expected UTF-8 text but byte {err.start} is not valid UTF-8 ({err.reason})"
        ) from err
    except RecursionError as err:
        raise PackageError(
            f"{member}: JSON nests too deeply; expected at most {MAX_JSON_DEPTH} levels"
        ) from err
    except ValueError as err:  # json.JSONDecodeError and the hooks above
        raise PackageError(f"{member}: invalid JSON: {err}") from err
    if _depth(value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise PackageError(
            f"{member}: JSON nests deeper than {MAX_JSON_DEPTH} levels; expected a shallow document"
        )
    return value


def loads_object(raw: bytes | str, *, member: str) -> dict[str, Any]:
    """Parse a JSON member that must be an object (a dict).

    Args:
        raw: The member's bytes or text.
        member: The member name used in error messages.

    Returns:
        The parsed object.

    Raises:
        PackageError: Parsing failed (see :func:`loads_strict`) or the top level is not an
            object.
    """
    value = loads_strict(raw, member=member)
    if not isinstance(value, dict):
        raise PackageError(
            f"{member}: expected a JSON object at the top level, found {type(value).__name__}"
        )
    return value


def dumps_canonical(value: Any, *, member: str) -> bytes:
    """Serialise a JSON value in the format's canonical form.

    Canonical form: keys sorted, two-space indent, ``", "``/``": "`` separators, non-ASCII
    kept as UTF-8, no NaN/Infinity, one trailing newline.

    Args:
        value: A JSON-typed value (dicts with string keys, lists, str, int, float, bool, None).
        member: The member name used in error messages.

    Returns:
        The UTF-8 bytes of the document.

    Raises:
        PackageError: The value holds something JSON cannot represent exactly (NaN,
            infinity, a non-string key, an unsupported type, or circular references).
    """
    try:
        text = json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as err:
        raise PackageError(
            f"{member}: cannot write as JSON ({err}); expected finite numbers, strings, "
            "booleans, null, lists and objects with string keys"
        ) from err
    return (text + "\n").encode("utf-8")
