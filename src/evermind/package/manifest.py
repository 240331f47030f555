"""The ``manifest.json`` of a `.evermind` package: building it and checking every field.

This module owns the manifest's field list, types and value rules (see docs/format.md),
the safe-name rule for archive members, and the ISO-8601 UTC timestamp form. The writer
builds manifests with :func:`build_manifest`; the reader checks untrusted ones with
:func:`validate_manifest` before it trusts any member.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from evermind.errors import PackageError
from evermind.package.affect import AFFECT_FIELD, check_affect_field
from evermind.package.head import HEAD_FIELD, check_head_field
from evermind.package.int8 import QUANT_FIELD, check_quant_field
from evermind.package.schema import ARCHITECTURE, MANIFEST, SCHEMA
from evermind.package.static_member import STATIC_FIELD, check_static_field

NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
VERSION_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
CREATED_AT_PATTERN = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z")
SHA256_PATTERN = re.compile(r"[0-9a-f]{64}")
_SEGMENT_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_MEMBER_NAME = 255
MAX_PRODUCER = 256

MANIFEST_FIELDS = frozenset(
    {
        "schema",
        "name",
        "version",
        "created_at",
        "producer",
        "architecture",
        "model",
        "tokenizer",
        "training",
        "bench",
        "files",
    }
)
#: Fields a manifest may carry or omit (``embedder`` absent: the package embeds without a
#: head; ``affect`` absent: no affect head; ``quantization`` present exactly when
#: ``model.dtype`` is ``int8``; ``static_embedder`` absent: no static embedder).
OPTIONAL_FIELDS = frozenset({HEAD_FIELD, QUANT_FIELD, AFFECT_FIELD, STATIC_FIELD})
MODEL_FIELDS = frozenset(
    {
        "d_model",
        "n_layer",
        "d_state",
        "d_conv",
        "expand",
        "d_inner",
        "dt_rank",
        "vocab_size",
        "n_params",
        "dtype",
    }
)
TOKENIZER_FIELDS = frozenset({"type", "vocab_size", "special_tokens"})
DTYPES = ("float32", "float16", "int8")


def _fail(field: str, expected: str, found: Any) -> PackageError:
    """Build the error for one manifest field."""
    shown = repr(found)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return PackageError(f"{MANIFEST}: field {field!r} must be {expected}, found {shown}")


def check_member_name(name: str) -> None:
    """Refuse an archive member name that is not a plain relative POSIX path.

    Args:
        name: The name as stored in the ZIP directory.

    Raises:
        PackageError: The name is absolute, uses backslashes or a drive letter, contains
            ``..``/``.``/empty segments, control characters, or other unsafe characters.
    """
    shown = repr(name[:80])
    if "\\" in name:
        raise PackageError(f"member {shown}: contains a backslash; expected '/' separators")
    if name.startswith("/") or re.match(r"[A-Za-z]:", name):
        raise PackageError(f"member {shown}: is an absolute path; expected a relative name")
    segments = name.split("/")
    if ".." in segments:
        raise PackageError(f"member {shown}: contains '..' (path traversal); refused")
    if len(name) > MAX_MEMBER_NAME or not all(_SEGMENT_PATTERN.fullmatch(s) for s in segments):
        raise PackageError(
            f"member {shown}: unsafe name; expected at most {MAX_MEMBER_NAME} characters of "
            "[A-Za-z0-9._-] in '/'-separated segments that start with a letter or digit"
        )


def utc_timestamp(moment: datetime) -> str:
    """Format an aware datetime as the manifest's ``created_at`` (``YYYY-MM-DDTHH:MM:SSZ``).

    Args:
        moment: A timezone-aware datetime; it is converted to UTC, microseconds dropped.

    Returns:
        e.g. ``"2025-01-31T12:00:00Z"``.

    Raises:
        PackageError: `moment` is naive (has no timezone).
    """
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise PackageError(
            f"created_at datetime {moment!r} is naive; expected a timezone-aware datetime"
        )
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_created_at(value: Any) -> None:
    """Check the ISO-8601 UTC timestamp field."""
    expected = "an ISO-8601 UTC timestamp like '2025-01-31T12:00:00Z'"
    if not isinstance(value, str) or not CREATED_AT_PATTERN.fullmatch(value):
        raise _fail("created_at", expected, value)
    try:
        datetime.strptime(value[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError as err:
        raise _fail("created_at", expected + " (a real date)", value) from err


def _is_int(value: Any, minimum: int) -> bool:
    """True for an int (not bool) at least `minimum`."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _is_number(value: Any) -> bool:
    """True for a finite int or float (not bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value)


def check_json_typed(value: Any, field: str, depth: int = 0) -> None:
    """Refuse anything that is not plain JSON (finite numbers, str-keyed dicts, lists).

    Args:
        value: The value to check.
        field: Dotted path for error messages, e.g. ``"training.loss"``.
        depth: Current nesting depth (stops at 32).

    Raises:
        PackageError: A value has a non-JSON type, a NaN/infinity, a non-string key, or
            nests deeper than 32.
    """
    if depth > 32:
        raise _fail(field, "nested at most 32 levels deep", "deeper nesting")
    if value is None or isinstance(value, bool | str) or _is_number(value):
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            check_json_typed(item, f"{field}[{index}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _fail(field, "an object with string keys", key)
            check_json_typed(item, f"{field}.{key}", depth + 1)
    else:
        raise _fail(field, "JSON-typed (finite number, string, bool, null, list, object)", value)


def _check_model(model: Any) -> None:
    """Check the ``model`` summary object."""
    if not isinstance(model, dict) or set(model) != MODEL_FIELDS:
        shown = sorted(model) if isinstance(model, dict) else model
        raise _fail("model", f"an object with exactly {sorted(MODEL_FIELDS)}", shown)
    for key in MODEL_FIELDS - {"dtype", "n_params"}:
        if not _is_int(model[key], 1):
            raise _fail(f"model.{key}", "a positive int", model[key])
    if not _is_int(model["n_params"], 0):
        raise _fail("model.n_params", "a non-negative int", model["n_params"])
    if model["dtype"] not in DTYPES:
        raise _fail("model.dtype", f"one of {list(DTYPES)}", model["dtype"])


def _check_tokenizer(tokenizer: Any) -> None:
    """Check the ``tokenizer`` summary object."""
    if not isinstance(tokenizer, dict) or set(tokenizer) != TOKENIZER_FIELDS:
        shown = sorted(tokenizer) if isinstance(tokenizer, dict) else tokenizer
        raise _fail("tokenizer", f"an object with exactly {sorted(TOKENIZER_FIELDS)}", shown)
    if not isinstance(tokenizer["type"], str) or not tokenizer["type"]:
        raise _fail("tokenizer.type", "a non-empty string", tokenizer["type"])
    if not _is_int(tokenizer["vocab_size"], 1):
        raise _fail("tokenizer.vocab_size", "a positive int", tokenizer["vocab_size"])
    special = tokenizer["special_tokens"]
    if not isinstance(special, dict) or not all(_is_int(v, 0) for v in special.values()):
        raise _fail("tokenizer.special_tokens", "an object of token -> id", special)


def _check_files(files: Any) -> None:
    """Check the ``files`` table: member name -> {sha256, size}."""
    if not isinstance(files, dict):
        raise _fail("files", "an object of member name -> {sha256, size}", files)
    for name, entry in files.items():
        check_member_name(name)
        if name == MANIFEST:
            raise _fail("files", "silent about manifest.json itself", name)
        where = f"files[{name!r}]"
        if not isinstance(entry, dict) or set(entry) != {"sha256", "size"}:
            raise _fail(where, "an object with exactly 'sha256' and 'size'", entry)
        if not isinstance(entry["sha256"], str) or not SHA256_PATTERN.fullmatch(entry["sha256"]):
            raise _fail(f"{where}.sha256", "64 lowercase hex digits", entry["sha256"])
        if not _is_int(entry["size"], 0):
            raise _fail(f"{where}.size", "a non-negative int", entry["size"])


def validate_manifest(manifest: Mapping[str, Any]) -> None:
    """Check every field of a parsed manifest (types, patterns, allowed values).

    Cross-checks against the other members (config, tokenizer, checksums) are the
    reader's job; this checks the manifest on its own.

    Args:
        manifest: The parsed ``manifest.json``.

    Raises:
        PackageError: A field is missing, unknown, or has the wrong type or value; the
            message names the field, what was expected and what was found.
    """
    if manifest.get("schema") != SCHEMA:
        raise _fail(
            "schema", f"{SCHEMA!r} (this reader understands format v2 only)", manifest.get("schema")
        )
    missing = MANIFEST_FIELDS - set(manifest)
    if missing:
        raise PackageError(f"{MANIFEST}: missing field(s) {sorted(missing)}")
    unknown = set(manifest) - MANIFEST_FIELDS - OPTIONAL_FIELDS
    if unknown:
        raise PackageError(
            f"{MANIFEST}: unknown field(s) {sorted(unknown)}; expected only "
            f"{sorted(MANIFEST_FIELDS | OPTIONAL_FIELDS)} (a new field needs a new schema "
            "version)"
        )
    if HEAD_FIELD in manifest:
        check_head_field(manifest[HEAD_FIELD])
    if AFFECT_FIELD in manifest:
        check_affect_field(manifest[AFFECT_FIELD])
    if STATIC_FIELD in manifest:
        check_static_field(manifest[STATIC_FIELD])
    if not isinstance(manifest["name"], str) or not NAME_PATTERN.fullmatch(manifest["name"]):
        raise _fail(
            "name", "1-64 chars of [a-z0-9._-] starting with a letter or digit", manifest["name"]
        )
    version = manifest["version"]
    if not isinstance(version, str) or not VERSION_PATTERN.fullmatch(version):
        raise _fail("version", "1-64 chars of [A-Za-z0-9._+-] starting alphanumeric", version)
    _check_created_at(manifest["created_at"])
    producer = manifest["producer"]
    if (
        not isinstance(producer, str)
        or not 1 <= len(producer) <= MAX_PRODUCER
        or not producer.isprintable()
    ):
        raise _fail("producer", f"1-{MAX_PRODUCER} printable characters", producer)
    if manifest["architecture"] != ARCHITECTURE:
        raise _fail("architecture", repr(ARCHITECTURE), manifest["architecture"])
    _check_model(manifest["model"])
    if (manifest["model"]["dtype"] == "int8") != (QUANT_FIELD in manifest):
        raise _fail(
            QUANT_FIELD,
            "present exactly when model.dtype is 'int8'",
            manifest.get(QUANT_FIELD, "absent"),
        )
    if QUANT_FIELD in manifest:
        check_quant_field(manifest[QUANT_FIELD])
    _check_tokenizer(manifest["tokenizer"])
    if not isinstance(manifest["training"], dict):
        raise _fail("training", "a JSON object", manifest["training"])
    check_json_typed(manifest["training"], "training")
    bench = manifest["bench"]
    if not isinstance(bench, dict) or not all(
        isinstance(key, str) and _is_number(value) for key, value in bench.items()
    ):
        raise _fail("bench", "an object of metric name -> finite number", bench)
    _check_files(manifest["files"])


def build_manifest(
    *,
    name: str,
    version: str,
    created_at: str,
    producer: str,
    model: Mapping[str, Any],
    tokenizer: Mapping[str, Any],
    training: Mapping[str, Any],
    bench: Mapping[str, float],
    files: Mapping[str, Mapping[str, Any]],
    embedder: Mapping[str, Any] | None = None,
    quantization: Mapping[str, Any] | None = None,
    affect: Mapping[str, Any] | None = None,
    static_embedder: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Assemble and check a manifest.

    Args:
        name: Package name, e.g. ``"notes-model"`` (served as ``evermind/<name>:<version>``).
        version: Package version, e.g. ``"1.0.0"``.
        created_at: ISO-8601 UTC timestamp from the caller (see :func:`utc_timestamp`).
        producer: What wrote it, e.g. ``"evermind 0.1.0 (pyodide)"``.
        model: Model summary (see :func:`evermind.package.schema.model_summary`).
        tokenizer: Tokenizer summary (see :func:`evermind.package.schema.tokenizer_summary`).
        training: Free-form JSON-typed training summary (steps, tokens, corpus, losses...).
        bench: Metric name -> number.
        files: Member name -> ``{"sha256": hex, "size": bytes}`` for every other member.
        embedder: The embedding head's description (see
            :meth:`evermind.package.head.EmbedderHead.describe`); None: no head.
        quantization: The int8 record (see :func:`evermind.package.int8.describe`); given
            exactly when ``model["dtype"]`` is ``"int8"``.
        affect: The affect head's description (see
            :meth:`evermind.package.affect.AffectHead.describe`); None: no affect head.
        static_embedder: The static embedder's description (see
            :func:`evermind.package.static_member.describe_static`); None: none.

    Returns:
        The manifest dict.

    Raises:
        PackageError: A field is invalid (same checks as :func:`validate_manifest`).
    """
    manifest: dict[str, Any] = {
        "architecture": ARCHITECTURE,
        "bench": dict(bench),
        "created_at": created_at,
        "files": {key: dict(value) for key, value in files.items()},
        "model": dict(model),
        "name": name,
        "producer": producer,
        "schema": SCHEMA,
        "tokenizer": dict(tokenizer),
        "training": dict(training),
        "version": version,
    }
    if embedder is not None:
        manifest[HEAD_FIELD] = dict(embedder)
    if quantization is not None:
        manifest[QUANT_FIELD] = dict(quantization)
    if affect is not None:
        manifest[AFFECT_FIELD] = dict(affect)
    if static_embedder is not None:
        manifest[STATIC_FIELD] = dict(static_embedder)
    validate_manifest(manifest)
    return manifest
