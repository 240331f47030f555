"""The optional static embedder of a package: ``static_embedder.safetensors`` + the manifest's
``static_embedder`` field.

A package may carry a whole :class:`~evermind.embedder.static.StaticEmbedder` (the file
``evermind build-embedder`` writes, e.g. the shipped base embedder): a WordPiece vocabulary,
a token table and per-token weights, stored byte for byte as that file. When it is present,
the package's sentence embedding is that embedder's (``Model.embed``, the runtime's
``/v1/embeddings``, memory recall, the semantic cache), not the SSM's pooled state, and an
embedding head the package may also hold is not used for embedding. The language model is
untouched: generation, evaluation and the affect head (which reads the pooled state) are as
before, and ``transformers`` / llama.cpp ignore the extra file.

The manifest field is an object with exactly ``format`` (``evermind-static-embedder``),
``dims``, ``vocab_size`` (the embedder's own vocabulary, not the model's), ``storage``
(``float32``, ``float16`` or ``int8``), ``fingerprint`` (``static-`` and the first 16 hex
digits of the member's sha256) and ``source`` (what was put in, e.g. ``base``; a string of
at most 256 printable characters). The reader refuses a member that disagrees with it.

Browser-safe: stdlib only. :mod:`evermind.embedder.static` imports this package's
submodules, so it is imported here inside the functions, never at module level.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from evermind.errors import PackageError

if TYPE_CHECKING:
    from evermind.embedder.static import StaticEmbedder

#: The archive member that holds the embedder file.
STATIC_MEMBER = "static_embedder.safetensors"
#: The manifest field that describes it.
STATIC_FIELD = "static_embedder"
STATIC_FIELDS = frozenset({"format", "dims", "vocab_size", "storage", "fingerprint", "source"})
STATIC_FORMAT = "evermind-static-embedder"
STATIC_STORAGES = ("float32", "float16", "int8")
MAX_SOURCE_CHARS = 256
_FINGERPRINT = re.compile(r"static-[0-9a-f]{16}")


def describe_static(embedder: StaticEmbedder, data: bytes, source: str) -> dict[str, Any]:
    """The manifest field for ``embedder`` stored as ``data`` (its file's bytes; ``source``:
    what was put in, e.g. ``base``)."""
    from evermind.embedder.static import fingerprint_of

    return {
        "format": STATIC_FORMAT,
        "dims": embedder.dims,
        "vocab_size": embedder.tokenizer.vocab_size,
        "storage": embedder.storage,
        "fingerprint": fingerprint_of(data),
        "source": source,
    }


def static_source(package: Any) -> str:
    """The ``source`` a package's static embedder was put in as (``file`` when it has none),
    for a rewrite that keeps it."""
    described = package.manifest.get(STATIC_FIELD)
    return str(described["source"]) if isinstance(described, dict) else "file"


def check_static_field(value: Any) -> None:
    """Checks the manifest's ``static_embedder`` field on its own (types and allowed values).

    Raises:
        PackageError: A key is missing or unknown, or a value has the wrong type.
    """
    where = f"manifest.json: field {STATIC_FIELD!r}"
    if not isinstance(value, dict) or set(value) != STATIC_FIELDS:
        raise PackageError(f"{where} must be an object with exactly {sorted(STATIC_FIELDS)}")
    if value["format"] != STATIC_FORMAT:
        raise PackageError(f"{where}.format must be {STATIC_FORMAT!r}, found {value['format']!r}")
    for key in ("dims", "vocab_size"):
        number = value[key]
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 1 << 20:
            raise PackageError(f"{where}.{key} must be an int in 1..1048576, found {number!r}")
    if value["storage"] not in STATIC_STORAGES:
        raise PackageError(
            f"{where}.storage must be one of {list(STATIC_STORAGES)}, found {value['storage']!r}"
        )
    fingerprint = value["fingerprint"]
    if not isinstance(fingerprint, str) or not _FINGERPRINT.fullmatch(fingerprint):
        raise PackageError(
            f"{where}.fingerprint must be 'static-' and 16 lowercase hex digits, found "
            f"{fingerprint!r:.80}"
        )
    source = value["source"]
    if not isinstance(source, str) or len(source) > MAX_SOURCE_CHARS or not source.isprintable():
        raise PackageError(
            f"{where}.source must be a printable string of at most {MAX_SOURCE_CHARS} characters"
        )


def static_from_member(data: bytes, described: Mapping[str, Any]) -> StaticEmbedder:
    """Reads the member's bytes and cross-checks them against the manifest field.

    Raises:
        PackageError: Not a valid embedder file, or it disagrees with the field.
    """
    from evermind.embedder.static import StaticEmbedder

    embedder = StaticEmbedder.from_bytes(data, name=STATIC_MEMBER)
    actual = describe_static(embedder, data, str(described["source"]))
    for key in sorted(STATIC_FIELDS):
        if actual[key] != described[key]:
            raise PackageError(
                f"{STATIC_MEMBER}: its {key} is {actual[key]!r} but manifest.json "
                f"{STATIC_FIELD}.{key} says {described[key]!r}"
            )
    return embedder


__all__ = [
    "STATIC_FIELD",
    "STATIC_MEMBER",
    "check_static_field",
    "describe_static",
    "static_from_member",
    "static_source",
]
