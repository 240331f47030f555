"""The optional embedding head of a package: ``embedder.safetensors`` + the manifest's ``embedder``.

The model's raw sentence vector is ``p = pool(h)``: the final normed hidden state mean-pooled
over the text and L2-normalised (what every host computed before heads existed). A head maps
it to the package's embedding::

    e = normalize(W · (p − μ) + Σₜ aₜ T[idₜ] / Σₜ aₜ)      with aₜ = a[idₜ]

``μ`` (``mean``, shape (d_model,)) is the mean raw vector of the texts the head was fitted on
(centring removes the common direction that makes raw cosines all ~1); ``W`` (``projection``,
shape (dim, d_model)) is optional — identity when absent, then ``dim == d_model``. The token
term is optional too: ``T`` (``tokens``, shape (vocab, dim)) holds one vector per token id and
``a`` (``token_weights``, shape (vocab,), > 0) weighs each id (an IDF); the term is their
weighted mean over the ids the model pooled. It carries word meaning the teacher gave each
token (distillation fits ``W`` and ``T`` together), which a small SSM trained for minutes
cannot learn alone. A package without a head embeds as ``p``. :func:`apply_head` is the one
pure-Python application (the tab has no numpy); native code applies the same maths with
numpy. Browser-safe: stdlib only.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evermind.errors import PackageError
from evermind.package.tensor import Tensor

#: The archive member that holds the head's tensors.
HEAD_MEMBER = "embedder.safetensors"
#: The manifest field that describes the head.
HEAD_FIELD = "embedder"
MEAN = "mean"
PROJECTION = "projection"
TOKENS = "tokens"
TOKEN_WEIGHTS = "token_weights"
HEAD_FIELDS = frozenset({"dim", "pooling", "centred", "projection", "method", "teacher"})
#: Optional manifest fields (absent in packages written before the token term existed).
OPTIONAL_HEAD_FIELDS = frozenset({"tokens"})
POOLING = "mean-l2"


@dataclass(frozen=True, eq=False)
class EmbedderHead:
    """Centring vector and optional projection applied after pooling.

    Attributes:
        mean: ``μ``, shape (d_model,), float32.
        projection: ``W``, shape (dim, d_model), float32; None for identity.
        method: How it was fitted, e.g. ``"distill"`` or ``"contrastive"``.
        teacher: The teacher's model id when distilled, else "".
        tokens: ``T``, shape (vocab, dim), float32; None: no token term.
        token_weights: ``a``, shape (vocab,), float32, every value > 0; given with ``tokens``.
    """

    mean: Tensor
    projection: Tensor | None = None
    method: str = "centre"
    teacher: str = ""
    tokens: Tensor | None = None
    token_weights: Tensor | None = None
    _mean_list: list[float] = field(init=False, repr=False, compare=False)
    _rows: list[list[float]] | None = field(init=False, repr=False, compare=False)
    _token_list: Any = field(init=False, repr=False, compare=False)
    _weight_list: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.mean.shape) != 1 or self.mean.shape[0] < 1:
            raise PackageError(f"{HEAD_MEMBER}: {MEAN!r} must be 1-D, got {self.mean.shape}")
        d = self.mean.shape[0]
        if self.projection is not None and (
            len(self.projection.shape) != 2
            or self.projection.shape[1] != d
            or self.projection.shape[0] < 1
        ):
            raise PackageError(
                f"{HEAD_MEMBER}: {PROJECTION!r} must have shape (dim, {d}), got "
                f"{self.projection.shape}"
            )
        self._check_tokens()
        for name, tensor in self.tensors().items():
            if not all(math.isfinite(x) for x in tensor.to_float32()):
                raise PackageError(f"{HEAD_MEMBER}: tensor {name!r} holds non-finite values")
        object.__setattr__(self, "_mean_list", list(self.mean.to_float32()))
        object.__setattr__(
            self, "_token_list", self.tokens.to_float32() if self.tokens is not None else None
        )
        object.__setattr__(
            self,
            "_weight_list",
            self.token_weights.to_float32() if self.token_weights is not None else None,
        )
        rows = None
        if self.projection is not None:
            flat = self.projection.to_float32()
            rows = [list(flat[r * d : (r + 1) * d]) for r in range(self.projection.shape[0])]
        object.__setattr__(self, "_rows", rows)

    def _check_tokens(self) -> None:
        if (self.tokens is None) != (self.token_weights is None):
            raise PackageError(
                f"{HEAD_MEMBER}: {TOKENS!r} and {TOKEN_WEIGHTS!r} come together; found only "
                f"{TOKENS if self.tokens is not None else TOKEN_WEIGHTS!r}"
            )
        if self.tokens is None or self.token_weights is None:
            return
        dim = self.dim
        if len(self.tokens.shape) != 2 or self.tokens.shape[1] != dim or self.tokens.shape[0] < 1:
            raise PackageError(
                f"{HEAD_MEMBER}: {TOKENS!r} must have shape (vocab, {dim}), got {self.tokens.shape}"
            )
        if self.token_weights.shape != (self.tokens.shape[0],):
            raise PackageError(
                f"{HEAD_MEMBER}: {TOKEN_WEIGHTS!r} must have shape ({self.tokens.shape[0]},), "
                f"got {self.token_weights.shape}"
            )
        if not all(x > 0 and math.isfinite(x) for x in self.token_weights.to_float32()):
            raise PackageError(f"{HEAD_MEMBER}: {TOKEN_WEIGHTS!r} must all be finite and > 0")

    @property
    def vocab(self) -> int:
        """Rows of the token term (0 without one)."""
        return int(self.tokens.shape[0]) if self.tokens is not None else 0

    @property
    def d_model(self) -> int:
        """Width of the raw pooled vector the head takes."""
        return int(self.mean.shape[0])

    @property
    def dim(self) -> int:
        """Width of the embedding the head gives."""
        return int(self.projection.shape[0]) if self.projection is not None else self.d_model

    def tensors(self) -> dict[str, Tensor]:
        """The tensors stored in :data:`HEAD_MEMBER`."""
        out = {MEAN: self.mean}
        if self.projection is not None:
            out[PROJECTION] = self.projection
        if self.tokens is not None and self.token_weights is not None:
            out[TOKENS], out[TOKEN_WEIGHTS] = self.tokens, self.token_weights
        return out

    def describe(self) -> dict[str, Any]:
        """The manifest's ``embedder`` field (``tokens`` only when the head has a token term,
        so packages without one read as before)."""
        out: dict[str, Any] = {
            "dim": self.dim,
            "pooling": POOLING,
            "centred": True,
            "projection": self.projection is not None,
            "method": self.method,
            "teacher": self.teacher,
        }
        if self.tokens is not None:
            out["tokens"] = True
        return out

    @classmethod
    def from_lists(
        cls,
        mean: Sequence[float],
        projection: Sequence[Sequence[float]] | None = None,
        method: str = "centre",
        teacher: str = "",
        tokens: Sequence[Sequence[float]] | None = None,
        token_weights: Sequence[float] | None = None,
    ) -> EmbedderHead:
        """Builds a head from plain numbers (e.g. ``ndarray.tolist()``)."""
        return cls(
            Tensor(shape=(len(mean),), data=array("f", list(mean))),
            _matrix(projection),
            method,
            teacher,
            _matrix(tokens),
            None
            if token_weights is None
            else Tensor(shape=(len(token_weights),), data=array("f", list(token_weights))),
        )

    def apply(self, pooled: Sequence[float], ids: Sequence[int] = ()) -> list[float]:
        """The embedding of one raw vector (and the ids it pooled), in pure Python."""
        return apply_head(self, pooled, ids)


def _matrix(rows: Sequence[Sequence[float]] | None) -> Tensor | None:
    if rows is None:
        return None
    listed = [list(r) for r in rows]
    width = len(listed[0]) if listed else 0
    return Tensor(shape=(len(listed), width), data=array("f", [x for r in listed for x in r]))


def apply_head(
    head: EmbedderHead | None, pooled: Sequence[float], ids: Sequence[int] = ()
) -> list[float]:
    """Applies ``head`` to one raw pooled vector; returns it unchanged when ``head`` is None.

    Args:
        head: The package's head, or None.
        pooled: The raw pooled vector ``p`` (d_model values).
        ids: The token ids the model pooled (the token term's input; ignored without one).

    Raises:
        PackageError: ``pooled`` is not ``head.d_model`` wide, or an id is outside the token
            table.
    """
    if head is None:
        return list(pooled)
    out = project(head, pooled)
    table, weights = head._token_list, head._weight_list
    if table is not None and weights is not None and ids:
        out = [x + t for x, t in zip(out, bag_mean(table, weights, ids), strict=True)]
    norm = math.sqrt(math.fsum(x * x for x in out))
    return [x / norm for x in out] if norm > 0 else out


def project(head: EmbedderHead, pooled: Sequence[float]) -> list[float]:
    """``W · (pooled − μ)``, unnormalised (the head's first term), in pure Python.

    Raises:
        PackageError: ``pooled`` is not ``head.d_model`` wide.
    """
    mu = head._mean_list
    if len(pooled) != len(mu):
        raise PackageError(f"embedder head takes {len(mu)} values, got {len(pooled)}")
    centred = [p - m for p, m in zip(pooled, mu, strict=True)]
    rows = head._rows
    if rows is None:
        return centred
    return [math.fsum(w * c for w, c in zip(r, centred, strict=True)) for r in rows]


def bag_mean(table: Sequence[float], weights: Sequence[float], ids: Sequence[int]) -> list[float]:
    """``Σₜ a[idₜ] T[idₜ] / Σₜ a[idₜ]`` for a flat row-major ``table`` (vocab × dim) and
    ``weights`` (vocab): the token term of ``ids`` (non-empty).

    Raises:
        PackageError: An id is outside the table.
    """
    vocab = len(weights)
    dim = len(table) // vocab
    total = [0.0] * dim
    mass = 0.0
    for i in ids:
        if not 0 <= i < vocab:
            raise PackageError(f"token id {i} is outside the head's token table ({vocab})")
        a = weights[i]
        mass += a
        base = i * dim
        for d in range(dim):
            total[d] += a * table[base + d]
    return [t / mass for t in total]


def check_head_field(value: Any) -> None:
    """Checks the manifest's ``embedder`` field on its own (types and allowed values)."""
    where = f"manifest.json: field {HEAD_FIELD!r}"
    if (
        not isinstance(value, dict)
        or not set(value) >= HEAD_FIELDS
        or not set(value) <= HEAD_FIELDS | OPTIONAL_HEAD_FIELDS
    ):
        raise PackageError(
            f"{where} must be an object with exactly {sorted(HEAD_FIELDS)} (and optionally "
            f"{sorted(OPTIONAL_HEAD_FIELDS)})"
        )
    dim = value["dim"]
    if not isinstance(dim, int) or isinstance(dim, bool) or not 1 <= dim <= 1 << 16:
        raise PackageError(f"{where}.dim must be an int in 1..65536, found {dim!r}")
    if value["pooling"] != POOLING or value["centred"] is not True:
        raise PackageError(f"{where}: pooling must be {POOLING!r} and centred true")
    if not isinstance(value["projection"], bool):
        raise PackageError(f"{where}.projection must be a boolean")
    if value.get("tokens", True) is not True:
        raise PackageError(f"{where}.tokens must be true when present")
    for key in ("method", "teacher"):
        if not isinstance(value[key], str) or len(value[key]) > 256:
            raise PackageError(f"{where}.{key} must be a string of at most 256 characters")


def head_from_member(
    tensors: Mapping[str, Tensor],
    described: Mapping[str, Any],
    d_model: int,
    vocab_size: int | None = None,
) -> EmbedderHead:
    """Builds and cross-checks the head read from :data:`HEAD_MEMBER` against the manifest.

    Raises:
        PackageError: Tensor names, shapes or dtype disagree with the manifest or the model.
    """
    expected = (
        {MEAN}
        | ({PROJECTION} if described["projection"] else set())
        | ({TOKENS, TOKEN_WEIGHTS} if described.get("tokens") else set())
    )
    if set(tensors) != expected:
        raise PackageError(
            f"{HEAD_MEMBER}: holds tensors {sorted(tensors)} but the manifest's embedder field "
            f"implies {sorted(expected)}"
        )
    for name, tensor in tensors.items():
        if tensor.dtype != "F32":
            raise PackageError(f"{HEAD_MEMBER}: tensor {name!r} is {tensor.dtype}; expected F32")
    f32 = {
        name: Tensor(shape=t.shape, data=t.to_float32(), dtype="F32") for name, t in tensors.items()
    }
    head = EmbedderHead(
        f32[MEAN],
        f32.get(PROJECTION),
        str(described["method"]),
        str(described["teacher"]),
        f32.get(TOKENS),
        f32.get(TOKEN_WEIGHTS),
    )
    if head.tokens is not None and vocab_size is not None and head.vocab != vocab_size:
        raise PackageError(
            f"{HEAD_MEMBER}: {TOKENS!r} has {head.vocab} rows but the model's vocab_size is "
            f"{vocab_size}"
        )
    if head.d_model != d_model:
        raise PackageError(
            f"{HEAD_MEMBER}: {MEAN!r} has {head.d_model} values but the model's d_model is "
            f"{d_model}"
        )
    if head.dim != described["dim"]:
        raise PackageError(
            f"manifest.json: field 'embedder.dim' is {described['dim']} but {HEAD_MEMBER} "
            f"gives {head.dim}"
        )
    return head
