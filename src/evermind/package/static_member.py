"""The optional static embedder of a package: ``static_embedder.safetensors`` + the manifest's
``static_embedder`` field.

A package may carry a whole static embedder (the file ``evermind build-embedder`` writes,
e.g. the shipped base embedder; docs/embedder.md): a WordPiece vocabulary, a token table and
per-token weights, stored byte for byte as that file. A host that loads the package
(``evermind.load``, the runtime) then embeds with it (``Model.embed``, ``/v1/embeddings``,
memory recall, the semantic cache), not with the SSM's pooled state; an embedding head the
package may also hold is then not used for embedding. The language model is untouched:
generation, evaluation and the affect head (which reads the pooled state) are as before, and
``transformers`` / llama.cpp ignore the extra file.

The manifest field is an object with exactly ``format`` (``evermind-static-embedder``),
``dims``, ``vocab_size`` (the embedder's own WordPiece vocabulary, not the model's),
``storage`` (``float32``, ``float16`` or ``int8``), ``fingerprint`` (``static-`` and the
first 16 hex digits of the member's sha256) and ``source`` (what was put in, e.g. ``base``;
at most 256 printable characters). The reader checks the member's structure against it (its
safetensors layout, format, tensor shapes and dtypes, vocabulary length, fingerprint); the
embedder itself is built from the bytes above this layer
(:func:`evermind.embedder.packaged.model_of`), which also checks the vocabulary's tokens.

Browser-safe: stdlib only.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evermind.errors import PackageError
from evermind.package.safetensors_io import decode_safetensors

#: The archive member that holds the embedder file.
STATIC_MEMBER = "static_embedder.safetensors"
#: The manifest field that describes it.
STATIC_FIELD = "static_embedder"
STATIC_FIELDS = frozenset({"format", "dims", "vocab_size", "storage", "fingerprint", "source"})
#: ``__metadata__["format"]`` of an embedder file (``evermind.embedder.static.FORMAT``).
STATIC_FORMAT = "evermind-static-embedder"
#: Stored dtype of the token vectors by storage name.
STATIC_STORAGES = {"float32": "F32", "float16": "F16", "int8": "I8"}
#: Largest safetensors header accepted (the vocabulary lives in it).
MAX_HEADER_BYTES = 8 * 1024 * 1024
MAX_SOURCE_CHARS = 256
MAX_DIMS = 1 << 16
MAX_VOCAB = 1 << 20
_FINGERPRINT = re.compile(r"static-[0-9a-f]{16}")


def fingerprint_of(data: bytes) -> str:
    """``static-`` and the first 16 hex digits of the file's sha256: the name its vectors
    are cached under (``evermind.embedder.static.fingerprint_of`` is the same rule)."""
    return "static-" + hashlib.sha256(data).hexdigest()[:16]


@dataclass(frozen=True, eq=False)
class StaticEmbedderFile:
    """A static embedder's file as a package stores it, and what was put in.

    Attributes:
        data: The file's bytes (what ``evermind build-embedder`` wrote), stored unchanged.
        source: What it is, for the manifest: ``base``, a file name, ….
    """

    data: bytes
    source: str = "file"

    def describe(self) -> dict[str, Any]:
        """The manifest field, read off the file.

        Raises:
            PackageError: The bytes are not an embedder file (see :func:`check_static_file`).
        """
        dims, vocab_size, storage = _structure(self.data)
        field = {
            "format": STATIC_FORMAT,
            "dims": dims,
            "vocab_size": vocab_size,
            "storage": storage,
            "fingerprint": fingerprint_of(self.data),
            "source": self.source,
        }
        check_static_field(field)
        return field


def _structure(data: bytes) -> tuple[int, int, str]:
    """``(dims, vocab_size, storage)`` of an embedder file, its layout checked.

    Raises:
        PackageError: Not a safetensors file, another format, or tensors, scale or
            vocabulary of the wrong shape or dtype.
    """
    where = STATIC_MEMBER
    tensors, metadata = decode_safetensors(data, member=where, max_header_bytes=MAX_HEADER_BYTES)
    if metadata.get("format") != STATIC_FORMAT:
        raise PackageError(
            f"{where}: format is {metadata.get('format')!r:.80}; expected {STATIC_FORMAT!r} "
            "(a file written by evermind build-embedder)"
        )
    vectors, weight = tensors.get("vectors"), tensors.get("weight")
    if vectors is None or weight is None or len(vectors.shape) != 2:
        raise PackageError(f"{where}: expected a 2-D 'vectors' tensor and a 'weight' tensor")
    vocab_size, dims = vectors.shape
    storage = {dtype: name for name, dtype in STATIC_STORAGES.items()}.get(vectors.dtype)
    if storage is None:
        raise PackageError(f"{where}: vectors are {vectors.dtype}; expected F32, F16 or I8")
    if weight.shape != (vocab_size,) or weight.dtype != "F32":
        raise PackageError(
            f"{where}: weight is {weight.dtype} {weight.shape}; expected F32 ({vocab_size},)"
        )
    expected = {"vectors", "weight"} | ({"vectors_scale"} if storage == "int8" else set())
    if set(tensors) != expected:
        raise PackageError(f"{where}: tensors are {sorted(tensors)}; expected {sorted(expected)}")
    scale = tensors.get("vectors_scale")
    if scale is not None and (scale.shape != (vocab_size,) or scale.dtype != "F32"):
        raise PackageError(
            f"{where}: vectors_scale is {scale.dtype} {scale.shape}; expected F32 ({vocab_size},)"
        )
    try:
        vocab = json.loads(metadata.get("vocab", ""))
    except ValueError as err:
        raise PackageError(f"{where}: the vocab metadata is not JSON ({err})") from err
    if not isinstance(vocab, list) or len(vocab) != vocab_size:
        raise PackageError(
            f"{where}: the vocab metadata must list {vocab_size} tokens (one per vectors row)"
        )
    return dims, vocab_size, storage


def check_static_field(value: Any) -> None:
    """Checks the manifest's ``static_embedder`` field on its own (types and allowed values).

    Raises:
        PackageError: A key is missing or unknown, or a value has the wrong type.
    """
    where = f"manifest.json: field {STATIC_FIELD!r}"
    if not isinstance(value, dict) or set(value) != STATIC_FIELDS:
        raise PackageError(f"{where} must be an object with exactly {sorted(STATIC_FIELDS)}")
    if value["format"] != STATIC_FORMAT:
        raise PackageError(
            f"{where}.format must be {STATIC_FORMAT!r}, found {value['format']!r:.80}"
        )
    for key, top in (("dims", MAX_DIMS), ("vocab_size", MAX_VOCAB)):
        number = value[key]
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= top:
            raise PackageError(f"{where}.{key} must be an int in 1..{top}, found {number!r:.80}")
    if value["storage"] not in STATIC_STORAGES:
        raise PackageError(
            f"{where}.storage must be one of {list(STATIC_STORAGES)}, found "
            f"{value['storage']!r:.80}"
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


def static_from_member(data: bytes, described: Mapping[str, Any]) -> StaticEmbedderFile:
    """The member's bytes, checked against the manifest field.

    Raises:
        PackageError: Not a valid embedder file, or it disagrees with the field.
    """
    found = StaticEmbedderFile(data, str(described["source"]))
    actual = found.describe()
    for key in sorted(STATIC_FIELDS):
        if actual[key] != described[key]:
            raise PackageError(
                f"{STATIC_MEMBER}: its {key} is {actual[key]!r} but manifest.json "
                f"{STATIC_FIELD}.{key} says {described[key]!r}"
            )
    return found


__all__ = [
    "STATIC_FIELD",
    "STATIC_MEMBER",
    "StaticEmbedderFile",
    "check_static_field",
    "fingerprint_of",
    "static_from_member",
]
