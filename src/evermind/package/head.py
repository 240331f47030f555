"""The optional embedding head of a package: ``embedder.safetensors`` + the manifest's ``embedder``.

The model's raw sentence vector is ``p = pool(h)``: the final normed hidden state mean-pooled
over the text and L2-normalised (what every host computed before heads existed). A head maps
it to the package's embedding::

    e = normalize(W · (p − μ))

``μ`` (``mean``, shape (d_model,)) is the mean raw vector of the texts the head was fitted on
(centring removes the common direction that makes raw cosines all ~1); ``W`` (``projection``,
shape (dim, d_model)) is optional — identity when absent, then ``dim == d_model``. A package
without a head embeds as ``p``. :func:`apply_head` is the one pure-Python application (the
tab has no numpy); native code applies the same maths with numpy. Browser-safe: stdlib only.
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
HEAD_FIELDS = frozenset({"dim", "pooling", "centred", "projection", "method", "teacher"})
POOLING = "mean-l2"


@dataclass(frozen=True, eq=False)
class EmbedderHead:
    """Centring vector and optional projection applied after pooling.

    Attributes:
        mean: ``μ``, shape (d_model,), float32.
        projection: ``W``, shape (dim, d_model), float32; None for identity.
        method: How it was fitted, e.g. ``"distill"`` or ``"contrastive"``.
        teacher: The teacher's model id when distilled, else "".
    """

    mean: Tensor
    projection: Tensor | None = None
    method: str = "centre"
    teacher: str = ""
    _mean_list: list[float] = field(init=False, repr=False, compare=False)
    _rows: list[list[float]] | None = field(init=False, repr=False, compare=False)

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
        for name, tensor in self.tensors().items():
            if not all(math.isfinite(x) for x in tensor.to_float32()):
                raise PackageError(f"{HEAD_MEMBER}: tensor {name!r} holds non-finite values")
        object.__setattr__(self, "_mean_list", list(self.mean.to_float32()))
        rows = None
        if self.projection is not None:
            flat = self.projection.to_float32()
            rows = [list(flat[r * d : (r + 1) * d]) for r in range(self.projection.shape[0])]
        object.__setattr__(self, "_rows", rows)

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
        return out

    def describe(self) -> dict[str, Any]:
        """The manifest's ``embedder`` field."""
        return {
            "dim": self.dim,
            "pooling": POOLING,
            "centred": True,
            "projection": self.projection is not None,
            "method": self.method,
            "teacher": self.teacher,
        }

    @classmethod
    def from_lists(
        cls,
        mean: Sequence[float],
        projection: Sequence[Sequence[float]] | None = None,
        method: str = "centre",
        teacher: str = "",
    ) -> EmbedderHead:
        """Builds a head from plain numbers (e.g. ``ndarray.tolist()``)."""
        proj = None
        if projection is not None:
            rows = [list(r) for r in projection]
            width = len(rows[0]) if rows else 0
            proj = Tensor(shape=(len(rows), width), data=array("f", [x for r in rows for x in r]))
        return cls(Tensor(shape=(len(mean),), data=array("f", list(mean))), proj, method, teacher)

    def apply(self, pooled: Sequence[float]) -> list[float]:
        """``normalize(W · (pooled − μ))`` for one raw vector, in pure Python."""
        return apply_head(self, pooled)


def apply_head(head: EmbedderHead | None, pooled: Sequence[float]) -> list[float]:
    """Applies ``head`` to one raw pooled vector; returns it unchanged when ``head`` is None.

    Raises:
        PackageError: ``pooled`` is not ``head.d_model`` wide.
    """
    if head is None:
        return list(pooled)
    mu = head._mean_list
    if len(pooled) != len(mu):
        raise PackageError(f"embedder head takes {len(mu)} values, got {len(pooled)}")
    centred = [p - m for p, m in zip(pooled, mu, strict=True)]
    rows = head._rows
    out = (
        centred
        if rows is None
        else [math.fsum(w * c for w, c in zip(r, centred, strict=True)) for r in rows]
    )
    norm = math.sqrt(math.fsum(x * x for x in out))
    return [x / norm for x in out] if norm > 0 else out


def check_head_field(value: Any) -> None:
    """Checks the manifest's ``embedder`` field on its own (types and allowed values)."""
    where = f"manifest.json: field {HEAD_FIELD!r}"
    if not isinstance(value, dict) or set(value) != HEAD_FIELDS:
        raise PackageError(f"{where} must be an object with exactly {sorted(HEAD_FIELDS)}")
    dim = value["dim"]
    if not isinstance(dim, int) or isinstance(dim, bool) or not 1 <= dim <= 1 << 16:
        raise PackageError(f"{where}.dim must be an int in 1..65536, found {dim!r}")
    if value["pooling"] != POOLING or value["centred"] is not True:
        raise PackageError(f"{where}: pooling must be {POOLING!r} and centred true")
    if not isinstance(value["projection"], bool):
        raise PackageError(f"{where}.projection must be a boolean")
    for key in ("method", "teacher"):
        if not isinstance(value[key], str) or len(value[key]) > 256:
            raise PackageError(f"{where}.{key} must be a string of at most 256 characters")


def head_from_member(
    tensors: Mapping[str, Tensor], described: Mapping[str, Any], d_model: int
) -> EmbedderHead:
    """Builds and cross-checks the head read from :data:`HEAD_MEMBER` against the manifest.

    Raises:
        PackageError: Tensor names, shapes or dtype disagree with the manifest or the model.
    """
    expected = {MEAN} | ({PROJECTION} if described["projection"] else set())
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
        f32[MEAN], f32.get(PROJECTION), str(described["method"]), str(described["teacher"])
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
