"""The static embedder: a weighted mean of token vectors, L2-normalised (browser-safe).

This module owns the embedder a base build writes and its file. A text's vector is::

    v = sum_i weight[id_i] * vectors[id_i]        (ids from the WordPiece tokenizer)
    embedding = v / |v|                           (zeros for a text without tokens)

``vectors`` is (V, D), stored as float32, float16, or int8 with one float32 scale per row
(``value = int8 * scale``, the rule of :mod:`evermind.package.int8`); ``weight`` is (V,)
float32, a per-token importance (SIF weights from the token's rank when distilled, then
learned). Two paths compute it: pure Python (:meth:`StaticEmbedder.embed_python`, for a tab
without numpy) and numpy (:meth:`StaticEmbedder.embed_numpy`, native), held to each other
within 1e-5 by a test; :meth:`StaticEmbedder.embed` picks numpy when it can be imported.

The file is one safetensors file, read and written by :mod:`evermind.package.safetensors_io`:
tensors ``vectors`` (and ``vectors_scale`` for int8) and ``weight``; its ``__metadata__``
holds ``format`` (``evermind-static-embedder``), ``config`` (JSON: dims, storage, teacher,
what the build did) and ``vocab`` (the JSON list of the tokenizer's tokens in id order).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from array import array
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evermind.embedder.wordpiece import WordPiece
from evermind.errors import InputError, PackageError
from evermind.package.float16 import float16_bytes_to_float32
from evermind.package.int8 import quantize_row_values
from evermind.package.safetensors_io import decode_safetensors, encode_safetensors
from evermind.package.tensor import Tensor

#: ``__metadata__["format"]`` of an embedder file.
FORMAT = "evermind-static-embedder"
#: How the token vectors may be stored.
STORAGES = ("float32", "float16", "int8")
#: Largest header accepted when reading (the vocabulary lives in it).
MAX_HEADER_BYTES = 8 * 1024 * 1024
#: Weighted token rows the pure-Python path keeps decoded.
ROW_MEMO = 8192
_DTYPE = {"float32": "F32", "float16": "F16", "int8": "I8"}


class StaticEmbedder:
    """Token vectors, per-token weights and the tokenizer whose ids index them.

    Args:
        tokenizer: The WordPiece tokenizer (its vocabulary size is V).
        vectors: (V, D) token vectors: float32 ``array('f')`` row-major, or a
            :class:`~evermind.package.tensor.Tensor` as stored (F32, F16, or I8 with scale).
        weight: (V,) per-token weights.
        config: What the build recorded (dims, storage, teacher, steps, …).

    Raises:
        PackageError: The shapes disagree with each other or with the vocabulary.
    """

    def __init__(
        self,
        tokenizer: WordPiece,
        vectors: Tensor,
        weight: Sequence[float],
        config: Mapping[str, Any] | None = None,
    ) -> None:
        if len(vectors.shape) != 2 or vectors.shape[0] != tokenizer.vocab_size:
            raise PackageError(
                f"static embedder: vectors have shape {vectors.shape} but the vocabulary has "
                f"{tokenizer.vocab_size} tokens; expected ({tokenizer.vocab_size}, D)"
            )
        if len(weight) != tokenizer.vocab_size:
            raise PackageError(
                f"static embedder: {len(weight)} weights for {tokenizer.vocab_size} tokens; "
                "expected one per token"
            )
        if vectors.dtype == "I8" and vectors.scale is None:
            raise PackageError("static embedder: int8 vectors came without their row scales")
        self.tokenizer = tokenizer
        self.stored = vectors
        self.weight = array("f", weight)
        self.dims = vectors.shape[1]
        self.config = dict(config or {})
        self._rows: dict[int, array[float]] = {}
        self._matrix: Any = None
        self._fingerprint: str | None = None

    @property
    def fingerprint(self) -> str:
        """Names these weights for the memory store's vector cache: ``static-`` and the first 16
        hex digits of the file's sha256 (read off the bytes when loaded, else computed once)."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint_of(self.to_bytes())
        return self._fingerprint

    @property
    def storage(self) -> str:
        """``float32``, ``float16`` or ``int8``."""
        return {v: k for k, v in _DTYPE.items()}[self.stored.dtype]

    @property
    def n_params(self) -> int:
        """Learned numbers: V × D vectors plus V weights."""
        return self.tokenizer.vocab_size * (self.dims + 1)

    # ---- pure Python -------------------------------------------------------------------

    def _row(self, token: int) -> array[float]:
        """Token ``token``'s vector times its weight, rounded to float32 as the numpy matrix is
        (memoised: at most :data:`ROW_MEMO` rows, 1 KB each at D = 256, so a tab stays small)."""
        known = self._rows.get(token)
        if known is not None:
            return known
        d, start = self.dims, token * self.dims
        stored = self.stored
        if stored.dtype == "I8":
            assert stored.scale is not None and isinstance(stored.data, bytes)
            scale = float(stored.scale.to_float32()[token])
            values = [q * scale for q in array("b", stored.data[start : start + d])]
        elif stored.dtype == "F16":
            assert isinstance(stored.data, bytes)
            values = list(float16_bytes_to_float32(stored.data[2 * start : 2 * (start + d)]))
        else:
            values = list(stored.to_float32()[start : start + d])
        w = float(self.weight[token])
        row = array("f", [w * x for x in values])
        if len(self._rows) >= ROW_MEMO:
            self._rows.clear()
        self._rows[token] = row
        return row

    def embed_python(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit vectors in pure Python: one list of D floats per text."""
        out: list[list[float]] = []
        for ids in self._encode(texts):
            acc = [0.0] * self.dims
            for token in ids:
                row = self._row(token)
                for j, x in enumerate(row):
                    acc[j] += x
            norm = math.sqrt(sum(x * x for x in acc))
            out.append([x / norm for x in acc] if norm > 0 else acc)
        return out

    # ---- numpy -------------------------------------------------------------------------

    def matrix(self) -> Any:
        """(V, D) float32 numpy matrix of weighted token vectors (built once)."""
        if self._matrix is None:
            import numpy as np

            stored = self.stored
            if stored.dtype == "I8":
                assert stored.scale is not None and isinstance(stored.data, bytes)
                q = np.frombuffer(stored.data, np.int8).reshape(stored.shape)
                scale = np.asarray(stored.scale.to_float32(), np.float64)
                rows = q.astype(np.float64) * scale[:, None]
            else:
                rows = np.asarray(stored.to_float32(), np.float64).reshape(stored.shape)
            weight = np.asarray(self.weight, np.float64)
            self._matrix = (rows * weight[:, None]).astype(np.float32)
        return self._matrix

    def embed_numpy(self, texts: Sequence[str]) -> Any:
        """Unit vectors with numpy: (N, D) float32."""
        return self.embed_numpy_ids(self._encode(texts))

    def embed_numpy_ids(self, encoded: Sequence[Sequence[int]]) -> Any:
        """:meth:`embed_numpy` of texts already tokenized (``tokenizer.encode`` of each)."""
        import numpy as np

        from evermind.ops.pool import l2_norms  # native-only, as this path is

        lengths = np.array([len(ids) for ids in encoded], np.int64)
        out = np.zeros((len(encoded), self.dims), np.float64)
        if lengths.sum():
            flat = np.fromiter((t for ids in encoded for t in ids), np.int64, int(lengths.sum()))
            rows = self.matrix()[flat].astype(np.float64)  # (T, D)
            starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            nonempty = lengths > 0
            out[nonempty] = np.add.reduceat(rows, starts[nonempty], axis=0)
        return (out / l2_norms(out)).astype(np.float32)

    def embed_with_counts(self, texts: Sequence[str]) -> tuple[Any, list[int]]:
        """:meth:`embed_numpy` and the tokens each text's vector sums (a request's usage)."""
        encoded = self._encode(texts)
        return self.embed_numpy_ids(encoded), [len(ids) for ids in encoded]

    def embed(self, texts: Sequence[str]) -> Any:
        """Unit vectors: numpy (N, D) float32 natively, else lists (pure Python)."""
        try:
            import numpy  # noqa: F401
        except ImportError:
            return self.embed_python(texts)
        return self.embed_numpy(texts)

    def _encode(self, texts: Sequence[str]) -> list[list[int]]:
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise InputError("embed takes a list of str; wrap a single text in a list")
        return [self.tokenizer.encode(text) for text in texts]

    # ---- the file ----------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The embedder file's bytes (see the module docstring)."""
        tensors = {"vectors": self.stored, "weight": Tensor((len(self.weight),), self.weight)}
        dtypes = {"vectors": self.stored.dtype, "weight": "F32"}
        if self.stored.scale is not None:
            tensors["vectors_scale"] = self.stored.scale
            dtypes["vectors_scale"] = "F32"
        metadata = {
            "format": FORMAT,
            "config": json.dumps(
                {**self.config, "dims": self.dims, "storage": self.storage}, sort_keys=True
            ),
            "vocab": json.dumps(self.tokenizer.vocab, ensure_ascii=False),
        }
        return encode_safetensors(tensors, dtype=dtypes, metadata=metadata)

    def save(self, path: str | os.PathLike[str]) -> int:
        """Writes the file atomically (a temporary file, then a rename); returns its size."""
        data = self.to_bytes()
        target = Path(path)
        partial = target.with_name(target.name + ".partial")
        partial.write_bytes(data)
        os.replace(partial, target)
        return len(data)

    @classmethod
    def from_bytes(cls, data: bytes, *, name: str = "embedder") -> StaticEmbedder:
        """Reads an embedder file's bytes.

        Raises:
            PackageError: Not an embedder file, or a tensor or the vocabulary is malformed.
        """
        tensors, metadata = decode_safetensors(data, member=name, max_header_bytes=MAX_HEADER_BYTES)
        if metadata.get("format") != FORMAT:
            raise PackageError(
                f"{name}: format is {metadata.get('format')!r}; expected {FORMAT!r} (is this "
                "a file written by evermind build-embedder?)"
            )
        try:
            vocab = json.loads(metadata["vocab"])
            config = json.loads(metadata.get("config", "{}"))
        except (KeyError, ValueError) as err:
            raise PackageError(f"{name}: vocab or config metadata is not JSON: {err}") from err
        if not isinstance(vocab, list) or not isinstance(config, dict):
            raise PackageError(f"{name}: vocab must be a JSON list and config a JSON object")
        missing = {"vectors", "weight"} - set(tensors)
        if missing:
            raise PackageError(f"{name}: tensors {sorted(missing)} are missing")
        vectors = tensors["vectors"]
        if vectors.dtype == "I8":
            scale = tensors.get("vectors_scale")
            if scale is None:
                raise PackageError(f"{name}: int8 vectors need a vectors_scale tensor")
            scale = Tensor(scale.shape, scale.to_float32())
            vectors = Tensor(vectors.shape, vectors.data, "I8", scale=scale)
        try:
            tokenizer = WordPiece(vocab)
        except Exception as err:
            raise PackageError(f"{name}: vocabulary: {err}") from err
        embedder = cls(tokenizer, vectors, tensors["weight"].to_float32(), config)
        embedder._fingerprint = fingerprint_of(data)
        return embedder

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> StaticEmbedder:
        """Reads the embedder file at ``path``.

        Raises:
            InputError: The file cannot be read.
            PackageError: It is not a valid embedder file.
        """
        try:
            data = Path(path).read_bytes()
        except OSError as err:
            raise InputError(f"embedder file {os.fspath(path)!r}: {err.strerror}") from err
        return cls.from_bytes(data, name=os.fspath(path))


def fingerprint_of(data: bytes) -> str:
    """The fingerprint of an embedder file's bytes (see :attr:`StaticEmbedder.fingerprint`)."""
    return "static-" + hashlib.sha256(data).hexdigest()[:16]


def make_vectors(values: Sequence[float], shape: tuple[int, int], storage: str) -> Tensor:
    """Stores row-major (V, D) values as ``storage`` (``float32``, ``float16`` or ``int8``).

    Raises:
        InputError: An unknown storage, or a value count that does not fit ``shape``.
    """
    if storage not in STORAGES:
        raise InputError(f"storage {storage!r} is not one of {list(STORAGES)}")
    if len(values) != shape[0] * shape[1]:
        raise InputError(f"{len(values)} token-vector values do not fill shape {shape}")
    if storage == "int8":
        data, scales = quantize_row_values(values, shape[0], shape[1], name="vectors")
        return Tensor(shape, data, "I8", scale=Tensor((shape[0],), scales))
    tensor = Tensor(shape, array("f", values))
    if storage == "float16":
        return Tensor(shape, tensor.encode("F16", name="vectors"), "F16")
    return tensor
