"""The embedder port of the memory store, and the vector cache in front of it.

Any object with an ``embed(texts)`` method works as an embedder, and so does a plain function
``f(texts)``; both may be sync or async and may return nested lists, tuples or a numpy array
(anything indexable, one row per text). ``as_embedder`` wraps such a thing in
``BoundEmbedder``, which validates and L2-normalises the output and settles the embedder's
**fingerprint**, the name of the model under which vectors are cached:

- an explicit ``fingerprint=`` argument wins;
- else the object's own ``fingerprint`` attribute (a non-empty string);
- else one is *derived*: the object's qualified type name plus a hash of its vector for a
  fixed probe sentence. Retraining the model changes the probe vector and so the fingerprint,
  so stale cached vectors are never mixed with fresh ones. Costs one extra embed call.

``VectorCache`` keys vectors by ``(fingerprint, sha256(content))``: a memory is re-embedded
only when its content or the model changes. Browser-safe: standard library only.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import math
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from evermind.errors import ConfigError, ShapeError
from evermind.memory.backend import MemoryBackend
from evermind.memory.records import content_hash
from evermind.search.cosine import normalise, normalise_rows

logger = logging.getLogger(__name__)

#: The sentence embedded to derive a fingerprint for embedders that do not name themselves.
PROBE_TEXT = "Evermind embedder fingerprint probe: the quick brown fox, 0123456789."


@runtime_checkable
class Embedder(Protocol):
    """What the store needs from a sentence embedder.

    Attributes:
        fingerprint: Names the model and its weights; vectors are cached under it.
    """

    fingerprint: str

    def embed(self, texts: list[str]) -> Any:
        """Returns one vector per text (rows of floats), or an awaitable of that."""
        ...


class BoundEmbedder:
    """An embedder with a settled fingerprint and validated, normalised output.

    Build it with :func:`as_embedder`. ``fingerprint`` is available after ``await ready()``
    (which ``embed`` calls itself).
    """

    def __init__(self, function: Any, name: str, fingerprint: str | None) -> None:
        self._function = function
        self._name = name
        self._fingerprint = fingerprint
        self.dim: int | None = None

    @property
    def fingerprint(self) -> str:
        """The fingerprint; call ``await ready()`` first when it was to be derived."""
        if self._fingerprint is None:
            raise ConfigError(
                f"embedder {self._name}: fingerprint not derived yet; hint: await ready() first"
            )
        return self._fingerprint

    async def ready(self) -> str:
        """Derives the fingerprint if needed and returns it."""
        if self._fingerprint is None:
            (probe,) = await self._call([PROBE_TEXT])
            digest = hashlib.sha256(
                ",".join(f"{x:.4f}" for x in probe).encode("ascii")
            ).hexdigest()[:16]
            self._fingerprint = f"{self._name}#{len(probe)}d-{digest}"
            logger.info("embedder %s: derived fingerprint %s", self._name, self._fingerprint)
        return self._fingerprint

    async def embed(self, texts: list[str]) -> list[array[float]]:
        """Embeds ``texts`` and returns L2-normalised float32 vectors, one per text.

        Raises:
            ShapeError: The embedder returned the wrong number of rows, ragged rows, a
                dimension other than the one it used before, or non-finite values.
        """
        await self.ready()
        return await self._call(texts)

    async def _call(self, texts: list[str]) -> list[array[float]]:
        if not texts:
            return []
        result = self._function(list(texts))
        if inspect.isawaitable(result):
            result = await result
        shape: tuple[int, ...] = getattr(result, "shape", ()) if hasattr(result, "astype") else ()
        if len(shape) == 2 and shape[0] == len(texts) and shape[1] > 0:
            # An (N, D) array (numpy natively): normalised in one vectorised pass, not row
            # by row in Python (the row loop cost ~0.4 ms a 384-d vector on bulk writes).
            try:
                return self._checked(normalise_rows(result))
            except (TypeError, ValueError):
                pass  # not numbers: the row-by-row path below says what is wrong
        rows = result.tolist() if hasattr(result, "tolist") else result
        try:
            count = len(rows)
        except TypeError as err:
            raise ShapeError(
                f"embedder {self._name}: expected one vector per text, got a "
                f"{type(result).__name__}; hint: return a list of lists or an (N, D) array"
            ) from err
        if count != len(texts):
            raise ShapeError(
                f"embedder {self._name}: expected {len(texts)} vectors (one per text), got "
                f"{count}; hint: embed(texts) must return shape (N, D)"
            )
        return self._checked([normalise(row) for row in rows])

    def _checked(self, vectors: list[array[float]]) -> list[array[float]]:
        """``vectors``, once each is known to have the embedder's one dimension."""
        for vector in vectors:
            if self.dim is None:
                self.dim = len(vector)
            if len(vector) != self.dim or len(vector) == 0:
                raise ShapeError(
                    f"embedder {self._name}: expected vectors of dimension {self.dim}, got "
                    f"{len(vector)}; hint: an embedder must return one fixed dimension"
                )
        return vectors


def as_embedder(model: Any, fingerprint: str | None = None) -> BoundEmbedder:
    """Wraps anything with ``embed(texts)``, or a plain callable, as a ``BoundEmbedder``.

    Args:
        model: An object with an ``embed(texts: list[str])`` method, or a function of
            ``texts``; sync or async; returning rows of floats.
        fingerprint: The cache name of the model; overrides ``model.fingerprint``. When
            neither exists it is derived from a probe embedding (see the module docstring).

    Raises:
        ConfigError: ``model`` has no ``embed`` method and is not callable, or the fingerprint
            is not a non-empty string.
    """
    if isinstance(model, BoundEmbedder):
        if fingerprint is None:
            return model
        return BoundEmbedder(model._function, model._name, fingerprint)
    function = getattr(model, "embed", None)
    if function is None or not callable(function):
        if not callable(model):
            raise ConfigError(
                f"embedder: expected an object with an embed(texts) method or a function, got "
                f"{type(model).__name__}; hint: wrap your model as embed(texts) -> vectors"
            )
        function = model
    own = getattr(model, "fingerprint", None) if function is not model else None
    chosen = fingerprint if fingerprint is not None else own
    if chosen is not None and (not isinstance(chosen, str) or not chosen):
        raise ConfigError(f"embedder: fingerprint must be a non-empty string, got {chosen!r}")
    kind = model if function is model else type(model)
    name = f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', repr(kind))}"
    return BoundEmbedder(function, name, chosen)


class VectorCache:
    """Vectors per ``(fingerprint, sha256(content))``: memory LRU in front of the backend.

    Args:
        embedder: The bound embedder that fills misses.
        backend: Where vectors persist across sessions (``None``: memory only).
        memory_items: How many vectors the in-memory LRU keeps.
    """

    def __init__(
        self,
        embedder: BoundEmbedder,
        backend: MemoryBackend | None = None,
        memory_items: int = 4096,
    ) -> None:
        self.embedder = embedder
        self._backend = backend
        self._lru: OrderedDict[tuple[str, str], array[float]] = OrderedDict()
        self._memory_items = memory_items
        self.embedded_texts = 0  # how many texts were actually sent to the embedder

    def _remember(self, key: tuple[str, str], vector: array[float]) -> None:
        self._lru[key] = vector
        self._lru.move_to_end(key)
        while len(self._lru) > self._memory_items:
            self._lru.popitem(last=False)

    async def vectors(
        self, texts: Sequence[str], persist: bool = True, lookup: bool = True
    ) -> list[array[float]]:
        """Returns one normalised vector per text, embedding only the texts not cached.

        Args:
            texts: The texts.
            persist: Also store new vectors in the backend (False for one-off queries).
            lookup: Look in the backend for what memory misses (False for one-off queries:
                they were never persisted, and on a vector-store backend the lookup is a
                query of its own on every recall).
        """
        fingerprint = await self.embedder.ready()
        digests = [content_hash(text) for text in texts]
        found: dict[str, array[float]] = {}
        for digest in digests:
            hit = self._lru.get((fingerprint, digest))
            if hit is not None:
                found[digest] = hit
                self._lru.move_to_end((fingerprint, digest))
        missing = [d for d in dict.fromkeys(digests) if d not in found]
        if missing and lookup and self._backend is not None:
            stored = await self._backend.get_vectors(fingerprint, missing)
            for digest, vector in stored.items():
                if self.embedder.dim is not None and len(vector) != self.embedder.dim:
                    continue  # a vector of another shape under this name: re-embed it
                row = array("f", vector)
                if not all(math.isfinite(x) for x in row):
                    continue
                found[digest] = row
                self._remember((fingerprint, digest), row)
        todo = {d: t for d, t in zip(digests, texts, strict=True) if d not in found}
        if todo:
            fresh = await self.embedder.embed(list(todo.values()))
            self.embedded_texts += len(todo)
            new = dict(zip(todo, fresh, strict=True))
            # Stored first, remembered after: a batch whose store failed is embedded and
            # stored again on retry (remembered here it would never reach the backend).
            if persist and self._backend is not None:
                await self._backend.put_vectors(fingerprint, new)
            for digest, vector in new.items():
                found[digest] = vector
                self._remember((fingerprint, digest), vector)
        return [found[d] for d in digests]
